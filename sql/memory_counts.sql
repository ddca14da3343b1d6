-- Memories per user: total, per lifecycle state and per retention tier (used by `memlife stats`).
SELECT
    user_id,
    COUNT(*) AS total,
    SUM(CASE WHEN state = 'candidate' THEN 1 ELSE 0 END) AS candidate,
    SUM(CASE WHEN state = 'active' THEN 1 ELSE 0 END) AS active,
    SUM(CASE WHEN state = 'core' THEN 1 ELSE 0 END) AS core,
    SUM(CASE WHEN state = 'archived' THEN 1 ELSE 0 END) AS archived,
    SUM(CASE WHEN tier = 'hot' THEN 1 ELSE 0 END) AS hot,
    SUM(CASE WHEN tier = 'warm' THEN 1 ELSE 0 END) AS warm,
    SUM(CASE WHEN tier = 'cold' THEN 1 ELSE 0 END) AS cold
FROM memories
GROUP BY user_id
ORDER BY user_id
