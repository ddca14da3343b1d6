-- The history of one supersession chain, oldest first: --param chain=<supersession_chain_id>
SELECT
    id,
    user_id,
    text,
    valid_from,
    valid_until,
    superseded_by,
    CASE WHEN valid_until IS NULL THEN 'current' ELSE 'superseded' END AS status
FROM memories
WHERE supersession_chain_id = $chain
ORDER BY valid_from, created_at, id
