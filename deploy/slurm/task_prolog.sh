#!/bin/sh
# Slurm TaskProlog of nccl-autotuner: exports the tuned NCCL / comm variables into every task.
#
# slurmstepd runs this as the job's user, with the task's environment, before each task, and reads its
# stdout: every `export NAME=value` line becomes a variable of the task (the value is taken literally,
# up to the end of the line: no shell quoting). We print only such lines, from `autotuner env --format
# slurm`.
#
# Settings, from the job's environment first, else from $AUTOTUNER_HOOK_ENV (default
# /etc/autotuner/hook.env, KEY=value or `export KEY=value` lines, LF or CRLF, see hook.env.example; a line
# that is neither is said, by its number, and skipped; an AUTOTUNER_ name not below is said by its name):
#   AUTOTUNER_SERVER, AUTOTUNER_TOKEN (a read-scope token), AUTOTUNER_CLUSTER, AUTOTUNER_WORKLOAD,
#   AUTOTUNER_HOOK (the autotuner executable; default: `autotuner` on PATH),
#   AUTOTUNER_HOOK_TIMEOUT (seconds for the whole hook, 1-60, default 5), AUTOTUNER_DISABLE=1 to opt a job out,
#   AUTOTUNER_CA_FILE (the CA that signs an https:// service's certificate),
#   AUTOTUNER_FINGERPRINT (what the jobs run on, where the hook cannot see it; see hook.env.example).
#
# It never fails the task: always exit 0, bounded time, and nothing at all is printed when unconfigured
# (but a hook.env line it could not read, with AUTOTUNER_HOOK_VERBOSE=1).
# Slurm discards a TaskProlog's stderr: the hook's warnings (service down, no config published) go to
# syslog (`logger -t autotuner-prolog`) and, with AUTOTUNER_HOOK_VERBOSE=1, to the stdout of the job's
# first task (`print` lines).

conf=${AUTOTUNER_HOOK_ENV:-/etc/autotuner/hook.env}

# Defaults from the file, without running it as shell code; the job's own values win.
cr=$(printf '\r')
unread=  # numbers of the lines that are not KEY=value: said once warn() can say it (below)
unknown=  # AUTOTUNER_ names the prolog does not read (names only: a value may be a token)
n=0
if [ -r "$conf" ]; then
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    line=${line%"$cr"}  # a file saved with CRLF: the CR would end every value (a path, VERBOSE=1)
    line=${line#"${line%%[![:blank:]]*}"}
    case "$line" in ''|'#'*) continue ;; esac
    # `export KEY=value`, as a file also sourced by a shell writes it
    case "$line" in export[[:blank:]]*) line=${line#export}; line=${line#"${line%%[![:blank:]]*}"} ;; esac
    # no `=`: not a setting, even of a known name (AUTOTUNER_TOKEN alone set the token to its own name);
    # the number only, the line may hold the token
    case "$line" in *=*) ;; *) unread="$unread $n"; continue ;; esac
    key=${line%%=*}
    value=${line#*=}
    case "$key" in
      AUTOTUNER_SERVER|AUTOTUNER_TOKEN|AUTOTUNER_CLUSTER|AUTOTUNER_WORKLOAD|AUTOTUNER_HOOK|\
      AUTOTUNER_HOOK_TIMEOUT|AUTOTUNER_HOOK_VERBOSE|AUTOTUNER_CACHE_DIR|AUTOTUNER_DISABLE|AUTOTUNER_CA_FILE|\
      AUTOTUNER_FINGERPRINT) ;;
      # not a name before the `=` (`KEY = value`): the number only
      ''|[0-9]*|*[!A-Za-z0-9_]*) unread="$unread $n"; continue ;;
      # ours by its name, yet none of them (AUTOTUNER_SEVRER): a typo that would untune every job in silence.
      # A name has no lower case: one that does may be a value glued to its name (the `=` left out of
      # AUTOTUNER_TOKENxYz...==), said by its number only
      AUTOTUNER_*[[:lower:]]*) unread="$unread $n"; continue ;;
      AUTOTUNER_*) unknown="$unknown $key"; continue ;;
      *) continue ;;  # another setting: not the prolog's
    esac
    # one level of surrounding quotes is allowed in the file
    case "$value" in
      \"*\") value=${value#\"}; value=${value%\"} ;;
      \'*\') value=${value#\'}; value=${value%\'} ;;
    esac
    eval "current=\${$key:-}"   # $key is one of the names above
    [ -n "$current" ] || export "$key=$value"
  done < "$conf"
fi

[ "${AUTOTUNER_DISABLE:-0}" = 1 ] && exit 0

warn() {
  command -v logger >/dev/null 2>&1 && logger -t autotuner-prolog -- "job ${SLURM_JOB_ID:-?}: $1" 2>/dev/null
  if [ "${AUTOTUNER_HOOK_VERBOSE:-0}" = 1 ] && [ "${SLURM_PROCID:-0}" = 0 ]; then
    printf 'print %s\n' "$1" | tr -d '\r'
  fi
}

# Said even where the file left the prolog unconfigured: the unread line may be AUTOTUNER_SERVER's.
[ -z "$unread" ] || warn "autotuner task prolog: $conf line(s)$unread not KEY=value (no spaces around =): ignored"
[ -z "$unknown" ] || warn "autotuner task prolog: $conf sets$unknown, which it does not read (a typo?): ignored"
[ -n "${AUTOTUNER_SERVER:-}" ] && [ -n "${AUTOTUNER_CLUSTER:-}" ] && [ -n "${AUTOTUNER_WORKLOAD:-}" ] || exit 0

hook=${AUTOTUNER_HOOK:-$(command -v autotuner 2>/dev/null)}
if [ -z "$hook" ] || [ ! -x "$hook" ]; then
  warn "autotuner task prolog: no autotuner executable (set AUTOTUNER_HOOK): no tuned config"
  exit 0
fi

limit=${AUTOTUNER_HOOK_TIMEOUT:-5}
# whole seconds from 1 to 60: `timeout 0` would mean no limit at all
case "$limit" in ''|*[!0-9]*) limit=5 ;; esac
limit=${limit#"${limit%%[!0]*}"}  # no leading zeros
case "$limit" in '') limit=5 ;; ?|[1-5]?|60) ;; *) limit=60 ;; esac
# The hook's own wait on the service (its --timeout), so that on a service that never answers its
# fallback (the cached config) still fits in the limit: the limit = Python's start + this wait (the node's
# stack read included) + the cache read (hook.CACHE_S, 0.25 s) + exit. Left at the hook's default (1.5 s)
# that did not fit in 1 s and the hook was killed before it served the cache. At least 0.6 s is left to
# the rest; a larger limit never lengthens the wait past the default: it is room for a slow start (a
# cold venv on NFS), not for a slower service.
case "$limit" in 1) wait_s=0.4 ;; 2) wait_s=1 ;; *) wait_s=1.5 ;; esac
set -- "$hook" env --format slurm --server "$AUTOTUNER_SERVER" --cluster "$AUTOTUNER_CLUSTER" \
  --workload "$AUTOTUNER_WORKLOAD" --timeout "$wait_s"
case "${SLURM_JOB_NUM_NODES:-}" in ''|*[!0-9]*) ;; *) set -- "$@" --nodes "$SLURM_JOB_NUM_NODES" ;; esac
# The token travels in the environment (AUTOTUNER_TOKEN), not on a command line that `ps` shows.
errors=$(mktemp 2>/dev/null) || errors=/dev/null
if command -v timeout >/dev/null 2>&1; then
  out=$(timeout -k 1 "$limit" "$@" </dev/null 2>"$errors")
  rc=$?
else
  out=$("$@" </dev/null 2>"$errors")
  rc=$?
fi
if [ "$errors" != /dev/null ]; then
  while IFS= read -r line; do [ -n "$line" ] && warn "$line"; done < "$errors"
  rm -f "$errors"
fi
[ "$rc" = 124 ] || [ "$rc" = 137 ] && warn "autotuner task prolog: the hook took over ${limit} s: no tuned config"
# Only export lines with a plain name reach Slurm: no `unset`/`print` directives from anywhere else.
printf '%s\n' "$out" | grep -E '^export [A-Za-z_][A-Za-z0-9_]*=' || true
exit 0
