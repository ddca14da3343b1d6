-- The memories with the most links, inbound and outbound (hubs of the link graph), with their
-- text. $user restricts to one user ('' for every user).
WITH ends AS (
    SELECT source_id AS memory_id, 1 AS outbound, 0 AS inbound FROM links
    WHERE $user = '' OR user_id = $user
    UNION ALL
    SELECT target_id AS memory_id, 0 AS outbound, 1 AS inbound FROM links
    WHERE $user = '' OR user_id = $user
), counted AS (
    SELECT memory_id, SUM(inbound) AS inbound, SUM(outbound) AS outbound,
           SUM(inbound) + SUM(outbound) AS total
    FROM ends GROUP BY memory_id
)
SELECT c.memory_id, m.user_id, c.total, c.inbound, c.outbound, m.state,
       substr(m.text, 1, 60) AS text
FROM counted c LEFT JOIN memories m ON m.id = c.memory_id
ORDER BY c.total DESC, c.memory_id
LIMIT 20
