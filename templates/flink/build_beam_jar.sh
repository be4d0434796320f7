#!/usr/bin/env bash
# Build a self-contained Flink job jar from the agent pipeline with Beam's
# FlinkRunner (--output_executable_path). `flink run JAR` submits it; the
# submitting machine needs neither Python nor Beam.
#
# See templates/flink/README.md for the version matrix, the job-server jar and
# the SDK worker environments.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: templates/flink/build_beam_jar.sh [options] -- PIPELINE_FLAGS...

Builds an executable Flink job jar from the beam-agents pipeline: runs
`python -m beam_agents run --runner=FlinkRunner --output_executable_path=JAR`
with the options below and passes PIPELINE_FLAGS (input, outputs, agent, model,
long-term store, --parallelism, --checkpointing_interval, ...) through unchanged.
The pipeline is not run: its graph and options are written into the jar, and
`flink run JAR` runs it later on a Flink cluster of the same minor version.

Options (each may also be set with the environment variable in brackets):
  --flink-version X.Y        Flink minor version of the target cluster; one of the
                             installed Beam's published versions [FLINK_VERSION]
                             (default: 1.19, the one Beam 2.61 and 2.77 share)
  --job-server-jar PATH|URL  Beam Flink job-server jar for that Flink version
                             [FLINK_JOB_SERVER_JAR]; if unset, Beam downloads
                             beam-runners-flink-X.Y-job-server-BEAM_VERSION.jar from
                             Maven Central (or uses ~/.apache_beam/cache/jars/)
  --output PATH              Jar to write [OUTPUT_JAR]
                             (default: build/beam-agents-flink-X.Y.jar)
  --environment-type TYPE    Where the Python SDK workers run: EXTERNAL, PROCESS or
                             DOCKER [ENVIRONMENT_TYPE] (default: EXTERNAL).
                             LOOPBACK is refused: the building process is gone
                             by the time the jar runs.
  --environment-config VAL   EXTERNAL: worker pool HOST:PORT as seen from each
                             TaskManager (default localhost:50000);
                             PROCESS: JSON, default {"command": "/opt/apache/beam/boot"};
                             DOCKER: the SDK worker image (required)
                             [ENVIRONMENT_CONFIG]
  --python PATH              Python with beam-agents and apache-beam installed
                             [PYTHON] (default: python)
  --dry-run                  Print the command instead of running it
  -h, --help                 Show this help

Example:
  templates/flink/build_beam_jar.sh \
    --flink-version 1.19 \
    --job-server-jar ~/jars/beam-runners-flink-1.19-job-server-2.61.0.jar \
    --output build/beam-agents-flink-1.19.jar \
    -- --input_files='gs://BUCKET/events/*.jsonl' \
       --output_path=gs://BUCKET/flink/intents.jsonl \
       --errors_path=gs://BUCKET/flink/errors.jsonl \
       --agent=examples.support_agent:agent
  flink run build/beam-agents-flink-1.19.jar
EOF
}

die() {
  printf 'build_beam_jar.sh: %s\n' "$1" >&2
  exit 2
}

flink_version="${FLINK_VERSION:-1.19}"
job_server_jar="${FLINK_JOB_SERVER_JAR:-}"
output_jar="${OUTPUT_JAR:-}"
environment_type="${ENVIRONMENT_TYPE:-EXTERNAL}"
environment_config="${ENVIRONMENT_CONFIG:-}"
python="${PYTHON:-python}"
dry_run=0

# One helper for both "--opt value" and "--opt=value".
need_value() {
  [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --dry-run) dry_run=1; shift ;;
    --flink-version) need_value "$@"; flink_version="$2"; shift 2 ;;
    --flink-version=*) flink_version="${1#*=}"; shift ;;
    --job-server-jar) need_value "$@"; job_server_jar="$2"; shift 2 ;;
    --job-server-jar=*) job_server_jar="${1#*=}"; shift ;;
    --output) need_value "$@"; output_jar="$2"; shift 2 ;;
    --output=*) output_jar="${1#*=}"; shift ;;
    --environment-type) need_value "$@"; environment_type="$2"; shift 2 ;;
    --environment-type=*) environment_type="${1#*=}"; shift ;;
    --environment-config) need_value "$@"; environment_config="$2"; shift 2 ;;
    --environment-config=*) environment_config="${1#*=}"; shift ;;
    --python) need_value "$@"; python="$2"; shift 2 ;;
    --python=*) python="${1#*=}"; shift ;;
    --) shift; break ;;
    *) die "unknown option '$1'; pipeline flags go after '--' (see --help)" ;;
  esac
done

[[ "$flink_version" =~ ^[0-9]+\.[0-9]+$ ]] \
  || die "--flink-version must be a Flink minor version like 1.19, not '$flink_version'"

environment_type="${environment_type^^}"
case "$environment_type" in
  EXTERNAL) environment_config="${environment_config:-localhost:50000}" ;;
  PROCESS)
    if [[ -z "$environment_config" ]]; then
      environment_config='{"command": "/opt/apache/beam/boot"}'
    fi
    ;;
  DOCKER)
    [[ -n "$environment_config" ]] \
      || die "DOCKER needs --environment-config IMAGE: an SDK worker image with the same apache-beam and beam-agents installed"
    ;;
  LOOPBACK)
    die "LOOPBACK runs the SDK workers inside this process, which exits once the jar is written; use EXTERNAL, PROCESS or DOCKER"
    ;;
  *) die "--environment-type must be EXTERNAL, PROCESS or DOCKER, not '$environment_type'" ;;
esac

if [[ -n "$job_server_jar" && "$job_server_jar" != *://* && ! -f "$job_server_jar" ]]; then
  die "--job-server-jar $job_server_jar does not exist; download beam-runners-flink-${flink_version}-job-server-<beam version>.jar (templates/flink/README.md)"
fi

output_jar="${output_jar:-build/beam-agents-flink-${flink_version}.jar}"
case "$output_jar" in
  /*) ;;
  *) output_jar="$PWD/$output_jar" ;;
esac

command=(
  "$python" -m beam_agents run
  --runner=FlinkRunner
  "--flink_version=$flink_version"
  "--output_executable_path=$output_jar"
  "--environment_type=$environment_type"
  "--environment_config=$environment_config"
)
if [[ -n "$job_server_jar" ]]; then
  command+=("--flink_job_server_jar=$job_server_jar")
fi
command+=("$@")

if [[ "$dry_run" -eq 1 ]]; then
  printf '%q ' "${command[@]}"
  printf '\n'
  exit 0
fi

if [[ -z "$job_server_jar" ]]; then
  echo "build_beam_jar.sh: no --job-server-jar; Beam will fetch the Flink ${flink_version} job server from Maven Central" >&2
fi
mkdir -p "$(dirname "$output_jar")"
rm -f "$output_jar"
"${command[@]}"
[[ -s "$output_jar" ]] || die "the job server did not write $output_jar"
echo "wrote $output_jar; submit it with: flink run $output_jar" >&2
