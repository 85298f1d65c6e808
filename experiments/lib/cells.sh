# Sourced by the study scripts run in named cells (cvae-gap.sh calls them designs), which a command line may
# name after the data to run those alone: architectures.sh, remedies.sh, cvae-gap.sh.
#   check_cells KIND "KNOWN ..." NAME ...  refuses a name not among KNOWN in one line on stderr, status 2
#                                          ("SCRIPT: no KIND NAME (KINDs: KNOWN)"), and keeps the names given
#   chosen NAME                            whether NAME runs: it was named, or none was
check_cells() {
  local kind=$1 known=$2 name
  shift 2
  for name in "$@"; do
    case " $known " in *" $name "*) ;; *) echo "$(basename "$0"): no $kind $name (${kind}s: $known)" >&2; exit 2 ;; esac
  done
  named_cells=" $* "
}

chosen() {
  [ "$named_cells" = "  " ] || [[ "$named_cells" == *" $1 "* ]]
}
