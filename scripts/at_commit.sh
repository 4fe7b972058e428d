# Sourced by scripts/train_demo.sh and scripts/train_demo_long.sh. `at COMMIT MODULE ARGS...` runs
# `python -m MODULE ARGS...` with the code (videoqa/ and scripts/) of COMMIT: a shipped run trained before the code
# that draws its questions changed is made again by the code it was trained with. Paths in ARGS must be absolute
# (the run's working folder is that code's); the code is unpacked once, under $runs.
at() {
    local code
    code="$(realpath -m "$runs")/code-$1"
    [ -d "$code" ] || { mkdir -p "$code"; git archive "$1" videoqa scripts | tar -x -C "$code"; }
    (cd "$code" && PYTHONPATH="$code" python -m "${@:2}")
}
