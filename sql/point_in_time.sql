-- What was true at a moment (seed 003 point-in-time query): --param at=2025-06-01T00:00:00Z
SELECT user_id, id, text, valid_from, valid_until
FROM memories
WHERE valid_from <= CAST($at AS TIMESTAMP)
  AND (valid_until IS NULL OR valid_until > CAST($at AS TIMESTAMP))
  AND kind <> 'episode'
ORDER BY user_id, valid_from, id
