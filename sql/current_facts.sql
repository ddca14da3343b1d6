-- Facts true now: not superseded (valid_until IS NULL), not archived; episodes excluded.
SELECT user_id, id, text, state, tier, valid_from, supersession_chain_id
FROM memories
WHERE valid_until IS NULL
  AND state <> 'archived'
  AND kind <> 'episode'
ORDER BY user_id, valid_from, id
