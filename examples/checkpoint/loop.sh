# A training loop that checkpoints before a maintenance, not during it
# (sourced by the job's entrypoint, which defines train_one_step and
# save_checkpoint). NOTICE is the file the downward API keeps equal to the
# pod's maintenance-handler.io/notice annotation (pod.yaml).
NOTICE=${NOTICE:-/etc/maintenance/notice}
saved=
while train_one_step; do
  MAINTENANCE_PHASE= MAINTENANCE_WINDOW_START= MAINTENANCE_EVICT_AT_TIME=
  [ -s "$NOTICE" ] && . "$NOTICE"
  near=$(( ${MAINTENANCE_WINDOW_START:-0} - $(date +%s) < 600 ))
  # starting: the eviction comes at MAINTENANCE_EVICT_AT; ongoing: the window
  # is open and the VM may stop before the drain; pending: checkpoint when near.
  if [ "$MAINTENANCE_PHASE" = starting ] || [ "$MAINTENANCE_PHASE" = ongoing ] || { [ "$MAINTENANCE_PHASE" = pending ] && [ "$near" = 1 ]; }; then
    [ "$saved" = "$MAINTENANCE_PHASE" ] || { save_checkpoint; saved=$MAINTENANCE_PHASE; }
  fi
done
