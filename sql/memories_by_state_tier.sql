-- Memories per user, lifecycle state and retention tier.
SELECT user_id, state, tier, COUNT(*) AS memories
FROM memories
GROUP BY user_id, state, tier
ORDER BY user_id, state, tier
