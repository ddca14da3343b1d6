#!/usr/bin/env bash
# A SessionStart hook (Claude Code and agents like it): prints the block of the user's
# consolidated summaries, which the agent adds to the session's context. Replace, never
# accumulate: `memlife summaries inject` writes exactly one block, and its version changes
# only when the chosen summaries do.
#
#   MEMLIFE_DB    the database (default: memlife.db beside the project)
#   MEMLIFE_USER  whose memories (default: $USER)
#   MEMLIFE_PROJECT  when set, summaries near this project's name rank first (this embeds
#                 the name with the embedder of memlife.toml, which must be the one that
#                 embedded the memories)
#
# To keep the block in a context file instead (e.g. CLAUDE.md), use
#   memlife summaries inject --user "$MEMLIFE_USER" --context CLAUDE.md
set -euo pipefail
project_dir="${CLAUDE_PROJECT_DIR:-$PWD}"
exec memlife --db "${MEMLIFE_DB:-$project_dir/memlife.db}" summaries inject \
    --user "${MEMLIFE_USER:-${USER:-$(id -un)}}" \
    ${MEMLIFE_PROJECT:+--project "$MEMLIFE_PROJECT"} \
    --stdout
