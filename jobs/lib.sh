# Shared logic of parsim's job scripts (sourced by production.sbatch, sweep.sbatch,
# workstation.sh): start or restart a run, and read how it ended.
#
# Environment:
#   PYTHON          interpreter with parsim installed (default: .venv/bin/python if present, else python3)
#   PARSIM_LAUNCH   launcher of the ranks. Default: under SLURM `srun --mpi=$PARSIM_SRUN_MPI`
#                   (PARSIM_SRUN_MPI default pmi2; use pmix or none as your site needs), else
#                   `mpiexec -n $NRANKS` (NRANKS default 2)
#   PARSIM_SUBMIT   command that submits a follow-up job (default: sbatch)
#   CHECKPOINT_EVERY  steps between checkpoints (default: 1000)
#   STEPS           total step count (default: the config's [simulation] steps)

parsim_python() {
    if [[ -n "${PYTHON:-}" ]]; then echo "$PYTHON"
    elif [[ -x .venv/bin/python ]]; then echo "$PWD/.venv/bin/python"
    else echo python3; fi
}

parsim_launcher() {
    if [[ -n "${PARSIM_LAUNCH:-}" ]]; then echo "$PARSIM_LAUNCH"
    elif [[ -n "${SLURM_JOB_ID:-}" ]]; then echo "srun --mpi=${PARSIM_SRUN_MPI:-pmi2}"
    else echo "mpiexec -n ${NRANKS:-2}"; fi
}

# newest usable checkpoint of a run directory (nothing if none): `parsim info` checks the
# manifest and every part; a damaged newest one is skipped (with a note on stderr)
parsim_latest_checkpoint() {
    local f py
    py="$(parsim_python)"
    for f in $(ls -1 "$1"/checkpoints/checkpoint_*.h5 2>/dev/null | sort -r); do
        if "$py" -m parsim info "$f" >/dev/null 2>&1; then
            echo "$f"
            return 0
        fi
        echo "parsim job: skipping the unusable checkpoint $f" >&2
    done
    return 0
}

# first word of DIR/status: done | interrupted | failed | missing
parsim_status() {
    if [[ -f "$1/status" ]]; then awk 'NR == 1 { print $1 }' "$1/status"; else echo missing; fi
}

# parsim_step CONFIG DIR: run CONFIG into DIR, or restart DIR from its newest checkpoint if it
# has one and is not done. Returns the launcher's exit status; DIR/status tells how it ended.
parsim_step() {
    local config="$1" dir="$2" py launch ck steps=()
    py="$(parsim_python)"
    launch="$(parsim_launcher)"
    [[ -n "${STEPS:-}" ]] && steps=(--steps "$STEPS")
    if [[ "$(parsim_status "$dir")" == done ]]; then
        echo "parsim job: $dir is done already"
        return 0
    fi
    ck="$(parsim_latest_checkpoint "$dir")"
    if [[ -n "$ck" ]]; then
        echo "parsim job: restarting from $ck"
        # shellcheck disable=SC2086  # the launcher is a command line
        $launch "$py" -m mpi4py -m parsim restart "$ck" --output "$dir" "${steps[@]}" \
            --checkpoint-every "${CHECKPOINT_EVERY:-1000}"
    else
        # no checkpoint and not done: whatever $dir holds stopped before its first checkpoint
        # (or failed); start it afresh (without --overwrite, parsim run refuses such a $dir)
        echo "parsim job: starting $config into $dir"
        # shellcheck disable=SC2086
        $launch "$py" -m mpi4py -m parsim run "$config" --output "$dir" --overwrite "${steps[@]}" \
            --checkpoint-every "${CHECKPOINT_EVERY:-1000}"
    fi
}
