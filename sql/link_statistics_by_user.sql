-- Links per user and type ('(all)' totals the user): how many, and how many of the user's
-- memories have at least one outbound / inbound link of that type. `shares_entity:{Name}`
-- links count as one family. $user restricts to one user ('' for every user).
WITH typed AS (
    SELECT
        user_id,
        CASE WHEN link_type LIKE 'shares_entity:%' THEN 'shares_entity' ELSE link_type END AS link_type,
        source_id,
        target_id
    FROM links
    WHERE $user = '' OR user_id = $user
)
SELECT user_id, link_type, COUNT(*) AS links,
       COUNT(DISTINCT source_id) AS memories_with_outbound,
       COUNT(DISTINCT target_id) AS memories_with_inbound
FROM typed GROUP BY user_id, link_type
UNION ALL
SELECT user_id, '(all)' AS link_type, COUNT(*) AS links,
       COUNT(DISTINCT source_id) AS memories_with_outbound,
       COUNT(DISTINCT target_id) AS memories_with_inbound
FROM typed GROUP BY user_id
ORDER BY user_id, links DESC, link_type
