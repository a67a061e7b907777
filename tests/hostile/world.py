"""What the hostile cases run against, built ONCE in the parent before any fork: a temporary
folder of bad files, the tiny models, a tiny PRM, and one explorer of each kind (a case sets one
control of its own forked copy)."""

from __future__ import annotations

import json
import struct
import tempfile
from functools import cached_property
from pathlib import Path

import torch

import tokpool as tp

QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
    "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 32768,
    "vocab_size": 151665, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


class World:
    """Lazily built fixtures; ``prepare()`` builds the ones every case shares."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="tokpool-hostile-"))

    def prepare(self) -> World:
        import matplotlib

        matplotlib.use("Agg")
        import tokpool.cli
        import tokpool.engine.check
        import tokpool.viz

        tokpool.cli._user_error_types()  # imports nbclient

        for name in ("tiny_model", "prm", "ownership", "memory", "tokens", "rewards",
                     "files"):
            getattr(self, name)
        return self

    # --- models ---------------------------------------------------------------------------

    @cached_property
    def tiny_model(self):
        return tp.load_model("tiny-decoder")

    @cached_property
    def prm(self):
        """A probe PRM on the tiny decoder (a real ``ProcessRewardModel``, milliseconds)."""
        from tokpool.prm.probe import ProbeHead, save_probe

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(3)
            head = ProbeHead(64, num_labels=2)
            head.mean.normal_()
        settings = {"base_model": "tiny-decoder", "layer": 1, "convention": "two_class",
                    "tag": "[MASK]", "separator": " ", "chat": False, "system": None,
                    "threshold": 0.5}
        self.probe_file = save_probe(self.tmp / "probe" / "probe.safetensors", head, settings)
        return tp.load_prm(self.probe_file, model=self.tiny_model)

    # --- explorers ------------------------------------------------------------------------

    @cached_property
    def ownership(self):
        return tp.ownership_explorer([20, 6, 9], budget=16, hidden_size=8)

    @cached_property
    def memory(self):
        return tp.memory_explorer(policies=("clone",))

    @cached_property
    def tokens(self):
        return tp.token_explorer(self.tiny_model, "hello world, hello tokens")

    @cached_property
    def rewards(self):
        return tp.step_reward_explorer(self.prm, "2 + 2?", ["2 + 2 = 4.", "So 4."])

    # --- files ----------------------------------------------------------------------------

    @cached_property
    def files(self) -> dict[str, Path]:
        """Bad files by name (each a path under ``tmp``)."""
        out: dict[str, Path] = {}

        def write(name: str, data: bytes | str) -> Path:
            path = self.tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
            out[name] = path
            return path

        # safetensors: header length, then a JSON header, then the data
        def safetensors(header: dict | bytes, data: bytes = b"", length: int | None = None):
            raw = header if isinstance(header, bytes) else json.dumps(header).encode()
            return struct.pack("<Q", len(raw) if length is None else length) + raw + data

        write("empty.safetensors", b"")
        write("short_length.safetensors", b"\x08\x00\x00")
        write("huge_header_length.safetensors", safetensors({}, length=2**40))
        write("bad_json.safetensors", safetensors(b"{not json"))
        write("bad_offsets.safetensors", safetensors(
            {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 64]},
             "__metadata__": {"tokpool": json.dumps({"format": "tokpool-prm-adapter/1"})}},
            b"\0" * 16))
        write("no_tensors.safetensors", safetensors({"__metadata__": {}}))
        write("not_a_probe.safetensors", safetensors(
            {"__metadata__": {"tokpool": "{broken"}}))
        # model folders
        tiny = self.tiny_model.hf_model.config.to_dict()
        folder = self.tmp / "empty_weights"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(tiny))
        (folder / "model.safetensors").write_bytes(safetensors({"__metadata__": {
            "format": "pt"}}))
        out["empty_weights"] = folder
        write("stub.gguf", b"GGUF\x03\x00\x00\x00")
        write("zeros.gguf", b"\0" * 64)
        write("bad.gguf", b"GGUF" + b"\xff" * 60)
        write("config_dir/config.json", json.dumps(QWEN3_8B))
        write("huge_positions/config.json", json.dumps({**QWEN3_8B,
                                                        "max_position_embeddings": 10**12}))
        write("positions_2_31/config.json", json.dumps({**QWEN3_8B,
                                                        "max_position_embeddings": 2**31}))
        write("layers_2_31/config.json", json.dumps({**QWEN3_8B, "num_hidden_layers": 2**31}))
        write("not_json/config.json", "{oops")
        write("list_json/config.json", "[1, 2]")
        # a damaged data folder for TOKPOOL_DATA_DIR
        write("data/prm/test.jsonl", '{"prompt": "2+2?", "completions": ["4"]}\n{broken\n')
        write("data_badrecord/prm/test.jsonl", '[1, 2]\n')
        write("text.txt", "hello world")
        return out
