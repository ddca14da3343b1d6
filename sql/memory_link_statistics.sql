-- One memory's links (seed 000 get_link_statistics for a memory): inbound (the memory is the
-- target) and outbound (the source) counts by type, with a '(all)' total per direction.
-- `shares_entity:{Name}` links count as one family. Parameter: $memory_id.
WITH ends AS (
    SELECT 'outbound' AS direction, link_type FROM links WHERE source_id = $memory_id
    UNION ALL
    SELECT 'inbound' AS direction, link_type FROM links WHERE target_id = $memory_id
), typed AS (
    SELECT direction,
           CASE WHEN link_type LIKE 'shares_entity:%' THEN 'shares_entity' ELSE link_type END AS link_type
    FROM ends
)
SELECT direction, link_type, COUNT(*) AS links FROM typed GROUP BY direction, link_type
UNION ALL
SELECT direction, '(all)' AS link_type, COUNT(*) AS links FROM typed GROUP BY direction
ORDER BY direction, links DESC, link_type
