#!/usr/bin/env bash
# The real app in a real terminal: start picochat in tmux with the offline model, chat,
# /compact, /info, open the checkpoint panel, and check what the screen shows.
# Usage: tests/tmux_smoke.sh [path/to/picochat]   (exit 0: every check passed)
set -euo pipefail

PICOCHAT=${1:-picochat}
WORK=$(mktemp -d)
SOCKET="picochat-smoke-$$"
trap 'tmux -L "$SOCKET" kill-server 2>/dev/null || true; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/config"
printf '[context_compaction]\nkeep_recent_tokens = 300\n' > "$WORK/config/config.toml"

# How long a step may take before the smoke test fails: a failure bound, not a guess at how
# long it takes (a busy machine makes a 1 s step take 10); as tests/helpers/waiting.py's WAIT_S.
WAIT_S=${SMOKE_WAIT_S:-60}

screen() { tmux -L "$SOCKET" capture-pane -p -t smoke; }
send() { tmux -L "$SOCKET" send-keys -t smoke "$@"; }
wait_for() {  # wait_for TEXT: until the screen shows TEXT
    local deadline=$((SECONDS + WAIT_S))
    until screen | grep -qF -- "$1"; do
        if ((SECONDS > deadline)); then
            echo "FAIL: never saw: $1" >&2
            screen >&2
            exit 1
        fi
        sleep 0.2  # between two looks at the pane: tmux offers no event for "text shown"
    done
    echo "ok: $1"
}

# the app's exit status lands in a file as it ends (tmux's own pane_dead_status can be empty)
tmux -L "$SOCKET" new-session -d -s smoke -x 120 -y 40 \
    "env -u COLUMNS -u LINES PICOCHAT_DATA_DIR='$WORK/data' PICOCHAT_CONFIG_DIR='$WORK/config' '$PICOCHAT'; echo \$? > '$WORK/exit'"
# the pane (and what the app last printed) stays once the app has quit: its end is an event
tmux -L "$SOCKET" set-option -w -t smoke remain-on-exit on
wait_for " offline "
wait_for "tokens before auto-compact"

for i in 1 2 3 4 5; do
    send "question $i: the build server listens on port 900$i and the canary host is cn-west-$i" Enter
    wait_for "cn-west-$i"
done
wait_for "built-in offline model"

send "/comp"
wait_for "/compact"          # the completion pop-up, with help
send "act keep the ports" Enter
wait_for "Context compacted:"
wait_for "The history is unchanged"

send "/info" Enter
wait_for "Auto-compact at"
wait_for "Summary in use"
send Escape

send F2
wait_for "Context per turn"
wait_for "● Summary 1"        # the list, first
wait_for "onward are sent as"
send F2

send "/nonsense" Enter
wait_for "unknown command /nonsense"

send C-q
deadline=$((SECONDS + WAIT_S))
until [[ -s $WORK/exit ]]; do  # the app has ended
    if ((SECONDS > deadline)); then
        echo "FAIL: ctrl+q did not end the app" >&2
        screen >&2
        exit 1
    fi
    sleep 0.2  # between two looks at the pane: tmux offers no event for a process's end
done
# what the app printed as it ended, scrolled off by tmux's "Pane is dead" line or not
everything() { tmux -L "$SOCKET" capture-pane -p -S - -t smoke; }
if everything | grep -q "Traceback"; then
    echo "FAIL: a traceback on exit" >&2
    everything >&2
    exit 1
fi
status=$(<"$WORK/exit")
if [[ $status != 0 ]]; then
    echo "FAIL: picochat exited $status" >&2
    everything >&2
    exit 1
fi
echo "tmux smoke: all checks passed"
