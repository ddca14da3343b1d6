-- Link statistics by type (seed 000 get_link_statistics): each link is one row read from either
-- end, so a memory's outbound links are rows with its id as source_id, inbound as target_id.
-- `shares_entity:{Name}` links count as one family, `shares_entity`. The '(all)' row totals
-- every type.
SELECT
    CASE WHEN link_type LIKE 'shares_entity:%' THEN 'shares_entity' ELSE link_type END AS link_type,
    COUNT(*) AS links,
    COUNT(DISTINCT source_id) AS memories_with_outbound,
    COUNT(DISTINCT target_id) AS memories_with_inbound,
    ROUND(AVG(confidence), 3) AS mean_confidence,
    SUM(CASE WHEN origin = 'llm' THEN 1 ELSE 0 END) AS from_llm
FROM links
GROUP BY 1
UNION ALL
SELECT
    '(all)' AS link_type,
    COUNT(*) AS links,
    COUNT(DISTINCT source_id) AS memories_with_outbound,
    COUNT(DISTINCT target_id) AS memories_with_inbound,
    ROUND(AVG(confidence), 3) AS mean_confidence,
    SUM(CASE WHEN origin = 'llm' THEN 1 ELSE 0 END) AS from_llm
FROM links
ORDER BY links DESC, link_type
