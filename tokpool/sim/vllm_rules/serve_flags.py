"""Every option of vLLM 0.33.0's ``vllm serve`` and how many values it takes:
GENERATED from vLLM's own parser by ``scripts/vllm_serve_flags.py`` (see it for what each
table holds), checked against that parser by ``tests/test_vllm_serve_line.py``. Rerun the
script for another vLLM; do not edit by hand.
"""

from __future__ import annotations

__all__ = ["CANONICAL", "FRONTEND_OPTIONS", "NEGATIVE_OPTIONS", "SERVE_OPTIONS",
           "VLLM_SERVE_VERSION"]

VLLM_SERVE_VERSION = "0.33.0"


def _options(text: str) -> list[str]:
    return text.split()


_NO_VALUE = _options("""
    --aggregate-engine-logging --allow-credentials --allow-deprecated-quantization
    --async-scheduling --cohere-is-reasoning-model --cudagraph-metrics
    --data-parallel-external-lb --data-parallel-hybrid-lb --data-parallel-multi-port-external-lb
    --dcp-q-replicate --disable-cascade-attn --disable-chunked-mm-input
    --disable-custom-all-reduce --disable-fastapi-docs --disable-hybrid-kv-cache-manager
    --disable-log-stats --disable-nccl-for-dp-synchronization --disable-sliding-window
    --disable-uvicorn-access-log --enable-auto-tool-choice --enable-batch-sharded-sampling
    --enable-chunked-prefill --enable-cumem-allocator --enable-dbo --enable-elastic-ep
    --enable-ep-weight-filter --enable-eplb --enable-expert-parallel --enable-fault-tolerance
    --enable-flash-late-interaction --enable-flashinfer-autotune --enable-force-include-usage
    --enable-hc-sp --enable-layerwise-nvtx-tracing --enable-log-deltas --enable-log-outputs
    --enable-log-requests --enable-logging-iteration-details --enable-lora
    --enable-mamba-cache-stochastic-rounding --enable-mamba-shared-prefix-checkpoint
    --enable-mfu-metrics --enable-mixed-moe-lora-format --enable-mm-embeds
    --enable-moe-shared-loras --enable-nccl-comm-suspend --enable-offline-docs
    --enable-per-request-metrics --enable-prefix-caching --enable-prompt-embeds
    --enable-prompt-tokens-details --enable-request-id-headers --enable-return-routed-experts
    --enable-scale-out --enable-server-load-tracking --enable-shm-tensor-arena
    --enable-sleep-mode --enable-ssl-refresh --enable-tokenizer-info-endpoint
    --enable-tower-connector-lora --enable-trace-replay --enforce-eager
    --exclude-tools-when-tool-choice-none --fail-on-environ-validation --fully-sharded-loras
    --grpc --headless --interleave-mm-strings --jit-monitor-verbose --kv-cache-metrics
    --kv-sharing-fast-prefill --language-model-only --log-error-stack
    --long-prefill-token-threshold-adaptive --mm-device-do-normalize --mm-encoder-only
    --monokernel --numa-bind --ray-workers-use-nsight --return-sampling-mask
    --return-tokens-as-token-ids --scheduler-reserve-full-isl --skip-mm-profiling
    --skip-tokenizer-init --sleep-mode-offload-cudagraph --specialize-active-lora
    --swa-bounded-replay --tokens-only --trust-remote-code --trust-request-chat-template
    --trust-request-mm-kwargs --use-fp64-gumbel --use-replayssm --use-tqdm-on-load -dpe -dph
    -dpm -ep
""")
_ONE_VALUE = _options("""
    --additional-config --all2all-backend --allowed-headers --allowed-local-media-path
    --allowed-methods --allowed-origins --anthropic-disabled-thinking-effort --api-server-count
    --attention-backend --attention-config --aux-output-config --block-size --chat-template
    --chat-template-content-format --code-revision --cohere-format --compilation-config --config
    --config-format --convert --cp-kv-cache-interleave-size --cpu-distributed-timeout-seconds
    --cpu-offload-gb --custom-histogram-buckets --data-parallel-address --data-parallel-backend
    --data-parallel-rank --data-parallel-rpc-port --data-parallel-size
    --data-parallel-size-local --data-parallel-start-rank --data-parallel-supervisor-port
    --dbo-decode-token-threshold --dbo-prefill-token-threshold --dcp-comm-backend
    --dcp-kv-cache-interleave-size --decode-context-parallel-size --default-chat-template-kwargs
    --default-mm-loras --device-ids --device-memory-utilization --diffusion-config
    --disable-access-log-for-endpoints --distributed-executor-backend
    --distributed-timeout-seconds --download-dir --dp-supervisor-probe-failure-threshold
    --dp-supervisor-probe-interval-s --dp-supervisor-probe-timeout-s --dp-sync-interval --dtype
    --ec-manager-config --ec-transfer-config --elastic-ep-max-dp-size --engram-config
    --eplb-config --expert-placement-strategy --fault-tolerance-config --fingerprint-mode
    --fingerprint-value --gdn-prefill-backend --generation-config --gpu-memory-utilization
    --grpc-port --h11-max-header-count --h11-max-incomplete-event-size --hf-config-path
    --hf-overrides --host --io-processor-plugin --ir-op-priority --jit-monitor-mode
    --kda-decode-backend --kda-prefill-backend --kernel-config --kv-cache-dtype
    --kv-cache-memory-bytes --kv-cache-metrics-sample --kv-events-config --kv-offloading-backend
    --kv-offloading-size --kv-transfer-config --limit-mm-per-prompt --linear-backend
    --load-format --log-config-file --log-level --logging-config --logprobs-mode
    --long-prefill-token-threshold --lora-dtype --mamba-backend --mamba-block-size
    --mamba-cache-dtype --mamba-cache-mode --mamba-cache-philox-rounds --mamba-ssm-cache-dtype
    --mamba-ssu-algorithm --master-addr --master-port --max-cpu-loras
    --max-cudagraph-capture-size --max-log-len --max-logprobs --max-lora-cls-labels
    --max-lora-rank --max-loras --max-model-len --max-num-active-seqs --max-num-batched-tokens
    --max-num-queued-reqs --max-num-queued-tokens --max-num-scheduled-tokens --max-num-seqs
    --max-parallel-loading-workers --media-io-kwargs --middleware --mm-encoder-attn-backend
    --mm-encoder-attn-dtype --mm-encoder-fp8-scale-path --mm-encoder-fp8-scale-save-margin
    --mm-encoder-fp8-scale-save-path --mm-encoder-tp-mode --mm-hasher-algorithm
    --mm-ipc-gpu-memory-gb --mm-processor-cache-gb --mm-processor-cache-type
    --mm-processor-device --mm-processor-kwargs --mm-shm-cache-max-object-size-mb
    --mm-tensor-ipc --model --model-class-overrides --model-impl --model-loader-extra-config
    --moe-backend --nnodes --node-rank --num-gpu-blocks-override --offload-backend
    --offload-group-size --offload-num-in-group --offload-prefetch-step --optimization-level
    --otlp-traces-endpoint --override-generation-config --per-request-spec-decode-metrics
    --performance-mode --pipeline-parallel-size --pooler-config --port
    --prefill-context-parallel-size --prefill-schedule-interval
    --prefix-cache-retention-interval --prefix-caching-hash-algo --prefix-match-unit
    --profiler-config --pt-load-map-location --quantization --quantization-config
    --reasoning-config --reasoning-effort-map --reasoning-parser --reasoning-parser-plugin
    --renderer-num-workers --replayssm-buffer-len --response-role --revision --root-path
    --runner --safetensors-load-strategy --safetensors-prefetch-block-size
    --safetensors-prefetch-num-threads --scheduler-cls --scheduling-policy --seed
    --show-hidden-metrics-for-version --shutdown-timeout --sleep-mode-backend
    --sparse-indexer-topk-backend --spec-method --spec-model --spec-tokens --speculative-config
    --sse-keep-alive-interval --ssl-ca-certs --ssl-cert-reqs --ssl-certfile --ssl-ciphers
    --ssl-keyfile --stream-interval --structured-outputs-config --tensor-parallel-size
    --tokenizer --tokenizer-mode --tokenizer-revision --tool-call-parser --tool-parser-plugin
    --tool-server --tool-strict-level --ubatch-size --uds --uvicorn-log-level
    --video-pruning-method --video-pruning-rate --watchdog-config --watermark --watermark-config
    --weight-transfer-config --worker-cls --worker-extension-cls -ac -asc -cc -dc -dcp -dp -dpa
    -dpb -dpl -dpn -dpp -dpr -n -pcp -pp -q -r -sc -tp
""")
_OPTIONAL_VALUE = _options("""
    --hf-token
""")
_VALUES = _options("""
    --allowed-media-domains --api-key --collect-detailed-traces --cpu-offload-params
    --cudagraph-capture-sizes --ignore-patterns --kv-cache-dtype-skip-layers --logits-processors
    --lora-modules --lora-target-modules --numa-bind-cpus --numa-bind-nodes --offload-params
    --served-model-name --sleep-preserve-parameter-names
""")

NEGATIVE_OPTIONS: frozenset[str] = frozenset(_options("""
    --disable-auto-tool-choice --disable-batch-sharded-sampling --disable-chunked-prefill
    --disable-cumem-allocator --disable-dbo --disable-elastic-ep --disable-ep-weight-filter
    --disable-eplb --disable-expert-parallel --disable-fault-tolerance
    --disable-flash-late-interaction --disable-flashinfer-autotune --disable-force-include-usage
    --disable-hc-sp --disable-layerwise-nvtx-tracing --disable-log-deltas --disable-log-outputs
    --disable-log-requests --disable-logging-iteration-details --disable-lora
    --disable-mamba-cache-stochastic-rounding --disable-mamba-shared-prefix-checkpoint
    --disable-mfu-metrics --disable-mixed-moe-lora-format --disable-mm-embeds
    --disable-moe-shared-loras --disable-nccl-comm-suspend --disable-offline-docs
    --disable-per-request-metrics --disable-prefix-caching --disable-prompt-embeds
    --disable-prompt-tokens-details --disable-request-id-headers --disable-return-routed-experts
    --disable-scale-out --disable-server-load-tracking --disable-shm-tensor-arena
    --disable-sleep-mode --disable-ssl-refresh --disable-tokenizer-info-endpoint
    --disable-tower-connector-lora --disable-trace-replay --enable-cascade-attn
    --enable-chunked-mm-input --enable-custom-all-reduce --enable-fastapi-docs
    --enable-hybrid-kv-cache-manager --enable-nccl-for-dp-synchronization
    --enable-sliding-window --enable-uvicorn-access-log --no-allow-credentials
    --no-allow-deprecated-quantization --no-async-scheduling --no-cohere-is-reasoning-model
    --no-cudagraph-metrics --no-data-parallel-external-lb --no-data-parallel-hybrid-lb
    --no-dcp-q-replicate --no-disable-cascade-attn --no-disable-chunked-mm-input
    --no-disable-custom-all-reduce --no-disable-fastapi-docs
    --no-disable-hybrid-kv-cache-manager --no-disable-nccl-for-dp-synchronization
    --no-disable-sliding-window --no-disable-uvicorn-access-log --no-enable-auto-tool-choice
    --no-enable-batch-sharded-sampling --no-enable-chunked-prefill --no-enable-cumem-allocator
    --no-enable-dbo --no-enable-elastic-ep --no-enable-ep-weight-filter --no-enable-eplb
    --no-enable-expert-parallel --no-enable-fault-tolerance --no-enable-flash-late-interaction
    --no-enable-flashinfer-autotune --no-enable-force-include-usage --no-enable-hc-sp
    --no-enable-layerwise-nvtx-tracing --no-enable-log-deltas --no-enable-log-outputs
    --no-enable-log-requests --no-enable-logging-iteration-details --no-enable-lora
    --no-enable-mamba-cache-stochastic-rounding --no-enable-mamba-shared-prefix-checkpoint
    --no-enable-mfu-metrics --no-enable-mixed-moe-lora-format --no-enable-mm-embeds
    --no-enable-moe-shared-loras --no-enable-nccl-comm-suspend --no-enable-offline-docs
    --no-enable-per-request-metrics --no-enable-prefix-caching --no-enable-prompt-embeds
    --no-enable-prompt-tokens-details --no-enable-request-id-headers
    --no-enable-return-routed-experts --no-enable-scale-out --no-enable-server-load-tracking
    --no-enable-shm-tensor-arena --no-enable-sleep-mode --no-enable-ssl-refresh
    --no-enable-tokenizer-info-endpoint --no-enable-tower-connector-lora
    --no-enable-trace-replay --no-enforce-eager --no-exclude-tools-when-tool-choice-none
    --no-fail-on-environ-validation --no-fully-sharded-loras --no-interleave-mm-strings
    --no-jit-monitor-verbose --no-kv-cache-metrics --no-kv-sharing-fast-prefill
    --no-language-model-only --no-log-error-stack --no-long-prefill-token-threshold-adaptive
    --no-mm-device-do-normalize --no-mm-encoder-only --no-monokernel --no-numa-bind
    --no-ray-workers-use-nsight --no-return-sampling-mask --no-return-tokens-as-token-ids
    --no-scheduler-reserve-full-isl --no-skip-mm-profiling --no-skip-tokenizer-init
    --no-sleep-mode-offload-cudagraph --no-specialize-active-lora --no-swa-bounded-replay
    --no-tokens-only --no-trust-remote-code --no-trust-request-chat-template
    --no-trust-request-mm-kwargs --no-use-fp64-gumbel --no-use-replayssm --no-use-tqdm-on-load
"""))

SERVE_OPTIONS: dict[str, str] = {
    **dict.fromkeys(_NO_VALUE, "0"), **dict.fromkeys(NEGATIVE_OPTIONS, "0"),
    **dict.fromkeys(_ONE_VALUE, "1"), **dict.fromkeys(_OPTIONAL_VALUE, "?"),
    **dict.fromkeys(_VALUES, "+"),
}

FRONTEND_OPTIONS: frozenset[str] = frozenset(_options("""
    --allow-credentials --allowed-headers --allowed-methods --allowed-origins
    --anthropic-disabled-thinking-effort --api-key --api-server-count --chat-template
    --chat-template-content-format --cohere-format --cohere-is-reasoning-model --config
    --data-parallel-supervisor-port --default-chat-template-kwargs
    --disable-access-log-for-endpoints --disable-auto-tool-choice --disable-fastapi-docs
    --disable-flash-late-interaction --disable-force-include-usage --disable-log-deltas
    --disable-log-outputs --disable-offline-docs --disable-per-request-metrics
    --disable-prompt-tokens-details --disable-request-id-headers --disable-scale-out
    --disable-server-load-tracking --disable-ssl-refresh --disable-tokenizer-info-endpoint
    --disable-uvicorn-access-log --dp-supervisor-probe-failure-threshold
    --dp-supervisor-probe-interval-s --dp-supervisor-probe-timeout-s --enable-auto-tool-choice
    --enable-fastapi-docs --enable-flash-late-interaction --enable-force-include-usage
    --enable-log-deltas --enable-log-outputs --enable-offline-docs --enable-per-request-metrics
    --enable-prompt-tokens-details --enable-request-id-headers --enable-scale-out
    --enable-server-load-tracking --enable-ssl-refresh --enable-tokenizer-info-endpoint
    --enable-uvicorn-access-log --exclude-tools-when-tool-choice-none --fingerprint-mode
    --fingerprint-value --grpc --grpc-port --h11-max-header-count
    --h11-max-incomplete-event-size --headless --host --log-error-stack --lora-modules
    --max-log-len --middleware --no-allow-credentials --no-cohere-is-reasoning-model
    --no-disable-fastapi-docs --no-disable-uvicorn-access-log --no-enable-auto-tool-choice
    --no-enable-flash-late-interaction --no-enable-force-include-usage --no-enable-log-deltas
    --no-enable-log-outputs --no-enable-offline-docs --no-enable-per-request-metrics
    --no-enable-prompt-tokens-details --no-enable-request-id-headers --no-enable-scale-out
    --no-enable-server-load-tracking --no-enable-ssl-refresh --no-enable-tokenizer-info-endpoint
    --no-exclude-tools-when-tool-choice-none --no-log-error-stack
    --no-return-tokens-as-token-ids --no-tokens-only --no-trust-request-chat-template
    --no-trust-request-mm-kwargs --port --reasoning-effort-map --response-role
    --return-tokens-as-token-ids --root-path --sse-keep-alive-interval --ssl-ca-certs
    --ssl-cert-reqs --ssl-certfile --ssl-ciphers --ssl-keyfile --tokens-only --tool-call-parser
    --tool-parser-plugin --tool-server --tool-strict-level --trust-request-chat-template
    --trust-request-mm-kwargs --uds --uvicorn-log-level -asc
"""))

CANONICAL: dict[str, str] = {
    '--device-memory-utilization': '--gpu-memory-utilization',
    '--disable-auto-tool-choice': '--enable-auto-tool-choice',
    '--disable-batch-sharded-sampling': '--enable-batch-sharded-sampling',
    '--disable-chunked-prefill': '--enable-chunked-prefill',
    '--disable-cumem-allocator': '--enable-cumem-allocator',
    '--disable-dbo': '--enable-dbo',
    '--disable-elastic-ep': '--enable-elastic-ep',
    '--disable-ep-weight-filter': '--enable-ep-weight-filter',
    '--disable-eplb': '--enable-eplb',
    '--disable-expert-parallel': '--enable-expert-parallel',
    '--disable-fault-tolerance': '--enable-fault-tolerance',
    '--disable-flash-late-interaction': '--enable-flash-late-interaction',
    '--disable-flashinfer-autotune': '--enable-flashinfer-autotune',
    '--disable-force-include-usage': '--enable-force-include-usage',
    '--disable-hc-sp': '--enable-hc-sp',
    '--disable-layerwise-nvtx-tracing': '--enable-layerwise-nvtx-tracing',
    '--disable-log-deltas': '--enable-log-deltas',
    '--disable-log-outputs': '--enable-log-outputs',
    '--disable-log-requests': '--enable-log-requests',
    '--disable-logging-iteration-details': '--enable-logging-iteration-details',
    '--disable-lora': '--enable-lora',
    '--disable-mamba-cache-stochastic-rounding': '--enable-mamba-cache-stochastic-rounding',
    '--disable-mamba-shared-prefix-checkpoint': '--enable-mamba-shared-prefix-checkpoint',
    '--disable-mfu-metrics': '--enable-mfu-metrics',
    '--disable-mixed-moe-lora-format': '--enable-mixed-moe-lora-format',
    '--disable-mm-embeds': '--enable-mm-embeds',
    '--disable-moe-shared-loras': '--enable-moe-shared-loras',
    '--disable-nccl-comm-suspend': '--enable-nccl-comm-suspend',
    '--disable-offline-docs': '--enable-offline-docs',
    '--disable-per-request-metrics': '--enable-per-request-metrics',
    '--disable-prefix-caching': '--enable-prefix-caching',
    '--disable-prompt-embeds': '--enable-prompt-embeds',
    '--disable-prompt-tokens-details': '--enable-prompt-tokens-details',
    '--disable-request-id-headers': '--enable-request-id-headers',
    '--disable-return-routed-experts': '--enable-return-routed-experts',
    '--disable-scale-out': '--enable-scale-out',
    '--disable-server-load-tracking': '--enable-server-load-tracking',
    '--disable-shm-tensor-arena': '--enable-shm-tensor-arena',
    '--disable-sleep-mode': '--enable-sleep-mode',
    '--disable-ssl-refresh': '--enable-ssl-refresh',
    '--disable-tokenizer-info-endpoint': '--enable-tokenizer-info-endpoint',
    '--disable-tower-connector-lora': '--enable-tower-connector-lora',
    '--disable-trace-replay': '--enable-trace-replay',
    '--enable-cascade-attn': '--disable-cascade-attn',
    '--enable-chunked-mm-input': '--disable-chunked-mm-input',
    '--enable-custom-all-reduce': '--disable-custom-all-reduce',
    '--enable-fastapi-docs': '--disable-fastapi-docs',
    '--enable-hybrid-kv-cache-manager': '--disable-hybrid-kv-cache-manager',
    '--enable-nccl-for-dp-synchronization': '--disable-nccl-for-dp-synchronization',
    '--enable-sliding-window': '--disable-sliding-window',
    '--enable-uvicorn-access-log': '--disable-uvicorn-access-log',
    '--no-allow-credentials': '--allow-credentials',
    '--no-allow-deprecated-quantization': '--allow-deprecated-quantization',
    '--no-async-scheduling': '--async-scheduling',
    '--no-cohere-is-reasoning-model': '--cohere-is-reasoning-model',
    '--no-cudagraph-metrics': '--cudagraph-metrics',
    '--no-data-parallel-external-lb': '--data-parallel-external-lb',
    '--no-data-parallel-hybrid-lb': '--data-parallel-hybrid-lb',
    '--no-dcp-q-replicate': '--dcp-q-replicate',
    '--no-disable-cascade-attn': '--disable-cascade-attn',
    '--no-disable-chunked-mm-input': '--disable-chunked-mm-input',
    '--no-disable-custom-all-reduce': '--disable-custom-all-reduce',
    '--no-disable-fastapi-docs': '--disable-fastapi-docs',
    '--no-disable-hybrid-kv-cache-manager': '--disable-hybrid-kv-cache-manager',
    '--no-disable-nccl-for-dp-synchronization': '--disable-nccl-for-dp-synchronization',
    '--no-disable-sliding-window': '--disable-sliding-window',
    '--no-disable-uvicorn-access-log': '--disable-uvicorn-access-log',
    '--no-enable-auto-tool-choice': '--enable-auto-tool-choice',
    '--no-enable-batch-sharded-sampling': '--enable-batch-sharded-sampling',
    '--no-enable-chunked-prefill': '--enable-chunked-prefill',
    '--no-enable-cumem-allocator': '--enable-cumem-allocator',
    '--no-enable-dbo': '--enable-dbo',
    '--no-enable-elastic-ep': '--enable-elastic-ep',
    '--no-enable-ep-weight-filter': '--enable-ep-weight-filter',
    '--no-enable-eplb': '--enable-eplb',
    '--no-enable-expert-parallel': '--enable-expert-parallel',
    '--no-enable-fault-tolerance': '--enable-fault-tolerance',
    '--no-enable-flash-late-interaction': '--enable-flash-late-interaction',
    '--no-enable-flashinfer-autotune': '--enable-flashinfer-autotune',
    '--no-enable-force-include-usage': '--enable-force-include-usage',
    '--no-enable-hc-sp': '--enable-hc-sp',
    '--no-enable-layerwise-nvtx-tracing': '--enable-layerwise-nvtx-tracing',
    '--no-enable-log-deltas': '--enable-log-deltas',
    '--no-enable-log-outputs': '--enable-log-outputs',
    '--no-enable-log-requests': '--enable-log-requests',
    '--no-enable-logging-iteration-details': '--enable-logging-iteration-details',
    '--no-enable-lora': '--enable-lora',
    '--no-enable-mamba-cache-stochastic-rounding': '--enable-mamba-cache-stochastic-rounding',
    '--no-enable-mamba-shared-prefix-checkpoint': '--enable-mamba-shared-prefix-checkpoint',
    '--no-enable-mfu-metrics': '--enable-mfu-metrics',
    '--no-enable-mixed-moe-lora-format': '--enable-mixed-moe-lora-format',
    '--no-enable-mm-embeds': '--enable-mm-embeds',
    '--no-enable-moe-shared-loras': '--enable-moe-shared-loras',
    '--no-enable-nccl-comm-suspend': '--enable-nccl-comm-suspend',
    '--no-enable-offline-docs': '--enable-offline-docs',
    '--no-enable-per-request-metrics': '--enable-per-request-metrics',
    '--no-enable-prefix-caching': '--enable-prefix-caching',
    '--no-enable-prompt-embeds': '--enable-prompt-embeds',
    '--no-enable-prompt-tokens-details': '--enable-prompt-tokens-details',
    '--no-enable-request-id-headers': '--enable-request-id-headers',
    '--no-enable-return-routed-experts': '--enable-return-routed-experts',
    '--no-enable-scale-out': '--enable-scale-out',
    '--no-enable-server-load-tracking': '--enable-server-load-tracking',
    '--no-enable-shm-tensor-arena': '--enable-shm-tensor-arena',
    '--no-enable-sleep-mode': '--enable-sleep-mode',
    '--no-enable-ssl-refresh': '--enable-ssl-refresh',
    '--no-enable-tokenizer-info-endpoint': '--enable-tokenizer-info-endpoint',
    '--no-enable-tower-connector-lora': '--enable-tower-connector-lora',
    '--no-enable-trace-replay': '--enable-trace-replay',
    '--no-enforce-eager': '--enforce-eager',
    '--no-exclude-tools-when-tool-choice-none': '--exclude-tools-when-tool-choice-none',
    '--no-fail-on-environ-validation': '--fail-on-environ-validation',
    '--no-fully-sharded-loras': '--fully-sharded-loras',
    '--no-interleave-mm-strings': '--interleave-mm-strings',
    '--no-jit-monitor-verbose': '--jit-monitor-verbose',
    '--no-kv-cache-metrics': '--kv-cache-metrics',
    '--no-kv-sharing-fast-prefill': '--kv-sharing-fast-prefill',
    '--no-language-model-only': '--language-model-only',
    '--no-log-error-stack': '--log-error-stack',
    '--no-long-prefill-token-threshold-adaptive': '--long-prefill-token-threshold-adaptive',
    '--no-mm-device-do-normalize': '--mm-device-do-normalize',
    '--no-mm-encoder-only': '--mm-encoder-only',
    '--no-monokernel': '--monokernel',
    '--no-numa-bind': '--numa-bind',
    '--no-ray-workers-use-nsight': '--ray-workers-use-nsight',
    '--no-return-sampling-mask': '--return-sampling-mask',
    '--no-return-tokens-as-token-ids': '--return-tokens-as-token-ids',
    '--no-scheduler-reserve-full-isl': '--scheduler-reserve-full-isl',
    '--no-skip-mm-profiling': '--skip-mm-profiling',
    '--no-skip-tokenizer-init': '--skip-tokenizer-init',
    '--no-sleep-mode-offload-cudagraph': '--sleep-mode-offload-cudagraph',
    '--no-specialize-active-lora': '--specialize-active-lora',
    '--no-swa-bounded-replay': '--swa-bounded-replay',
    '--no-tokens-only': '--tokens-only',
    '--no-trust-remote-code': '--trust-remote-code',
    '--no-trust-request-chat-template': '--trust-request-chat-template',
    '--no-trust-request-mm-kwargs': '--trust-request-mm-kwargs',
    '--no-use-fp64-gumbel': '--use-fp64-gumbel',
    '--no-use-replayssm': '--use-replayssm',
    '--no-use-tqdm-on-load': '--use-tqdm-on-load',
    '-ac': '--attention-config',
    '-asc': '--api-server-count',
    '-cc': '--compilation-config',
    '-dc': '--diffusion-config',
    '-dcp': '--decode-context-parallel-size',
    '-dp': '--data-parallel-size',
    '-dpa': '--data-parallel-address',
    '-dpb': '--data-parallel-backend',
    '-dpe': '--data-parallel-external-lb',
    '-dph': '--data-parallel-hybrid-lb',
    '-dpl': '--data-parallel-size-local',
    '-dpm': '--data-parallel-multi-port-external-lb',
    '-dpn': '--data-parallel-rank',
    '-dpp': '--data-parallel-rpc-port',
    '-dpr': '--data-parallel-start-rank',
    '-ep': '--enable-expert-parallel',
    '-n': '--nnodes',
    '-pcp': '--prefill-context-parallel-size',
    '-pp': '--pipeline-parallel-size',
    '-q': '--quantization',
    '-r': '--node-rank',
    '-sc': '--speculative-config',
    '-tp': '--tensor-parallel-size',
}
