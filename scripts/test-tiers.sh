# Sourced by test.sh and test-unit.sh: which of the packages' own tests the fast tier leaves
# to the full suite (`npm test` runs them in its lanes, beside the end-to-end files).
#  - they start a local docker-registry or S3 server, or probe runsc;
#  - they race the filesystem through deep trees and many rounds (symlink swaps beneath a
#    walk, repository faults, zstd's scratch sweeping): seconds of CPU each, about the
#    safety of paths rather than the lifecycle a quick loop checks.
full_suite_only() {
  case "$1" in
    */images-registry.test.ts | */images-estargz.test.ts | */probe-memo.test.ts | */repository-s3-backend.test.ts) return 0 ;;
    */volume-walk-race.test.ts | */beneath-race.test.ts | */repository-faults.test.ts | */zstd-scratch-unit.test.ts) return 0 ;;
    *) return 1 ;;
  esac
}
