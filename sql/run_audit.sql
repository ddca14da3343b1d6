-- What one run did, in order: --param run_id=<run_id from the runs table>
SELECT created_at, operation, target_id, source_ids, classification, confidence, reasoning,
       before_state, after_state
FROM audit_log
WHERE run_id = $run_id
ORDER BY created_at, id
