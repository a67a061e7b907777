"""The shipped step-labelled dataset: schema, label convention, error mix, determinism."""

import re
from collections import Counter
from pathlib import Path

import pytest

import tokpool as tp
from tokpool.prm.dataset import DEFAULT_SIZES, ERROR_TYPES, HARD_ERROR_TYPES, write_prm_dataset

DATA = Path(__file__).resolve().parents[1] / "data" / "prm"
STEP = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")
OPS = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__floordiv__}


@pytest.fixture(scope="module", params=["train", "test", "dev", "hard"])
def split(request):
    return request.param, tp.load_prm_dataset(request.param)


def _kinds(name):
    return HARD_ERROR_TYPES if name == "hard" else ERROR_TYPES


def test_schema_is_trl_stepwise_plus_first_error(split):
    name, records = split
    assert len(records) == DEFAULT_SIZES[name]
    for r in records:
        assert set(r) == {"id", "prompt", "completions", "labels", "first_error", "error_type",
                          "answer"}
        assert isinstance(r["prompt"], str) and r["prompt"].endswith("?")
        assert all(isinstance(s, str) and s for s in r["completions"])
        # a skipped step (hard split) leaves one computation fewer
        assert len(r["labels"]) == len(r["completions"]) >= (3 if name == "hard" else 4)
        assert all(isinstance(x, bool) for x in r["labels"])
        assert r["id"].startswith(name)


def test_labels_follow_the_first_error_convention(split):
    # correct up to the first error, incorrect from it on; -1 when all are correct
    for r in split[1]:
        fe, labels = r["first_error"], r["labels"]
        if fe == -1:
            assert all(labels) and r["error_type"] is None
        else:
            assert labels == [i < fe for i in range(len(labels))]
            assert r["error_type"] in _kinds(split[0])


def test_correct_solutions_compute_right_and_wrong_ones_do_not(split):
    for r in split[1]:
        final = int(r["completions"][-1].removeprefix("So the answer is ").rstrip("."))
        for step, ok in zip(r["completions"][:-1], r["labels"], strict=False):
            a, op, b, result = STEP.search(step).groups()
            if ok:
                assert OPS[op](int(a), int(b)) == int(result), (r["id"], step)
        if r["first_error"] == -1:
            assert final == r["answer"]
        else:
            assert final != r["answer"], r["id"]


def test_errors_are_varied_and_balanced(split):
    records = split[1]
    kinds = Counter(r["error_type"] for r in records)
    assert kinds[None] == len(records) // 2
    for kind in _kinds(split[0]):  # each kind is a real share, not a token presence
        assert kinds[kind] >= len(records) // 16, kinds
    positions = Counter(r["first_error"] for r in records if r["first_error"] >= 0)
    assert len(positions) >= 5  # first errors spread over the chain
    # wrong arithmetic is not the only way to be wrong: errors with correct arithmetic exist
    local_ok = 0
    for r in records:
        fe = r["first_error"]
        if 0 <= fe < len(r["completions"]) - 1:
            a, op, b, result = STEP.search(r["completions"][fe]).groups()
            local_ok += OPS[op](int(a), int(b)) == int(result)
    assert local_ok >= len(records) // 8


def test_splits_never_repeat_a_problem():
    prompts = {s: {r["prompt"] for r in tp.load_prm_dataset(s)}
               for s in ("train", "test", "dev", "hard")}
    names = list(prompts)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not prompts[a] & prompts[b], (a, b)


def _numbers(text):
    words = {"doubles": 2, "triples": 3, "quadruples": 4}  # "Next, Mia doubles the number ..."
    return {int(n) for n in re.findall(r"\d+", text)} | {v for w, v in words.items() if w in text}


def test_hard_errors_are_of_kinds_train_never_has():
    train = {r["error_type"] for r in tp.load_prm_dataset("train")}
    assert not train & set(HARD_ERROR_TYPES)
    for r in tp.load_prm_dataset("hard"):
        fe = r["first_error"]
        if r["error_type"] == "wrong_operand":
            # a real number of the context, used in the wrong place; computed correctly
            a, op, b, result = STEP.search(r["completions"][fe]).groups()
            assert OPS[op](int(a), int(b)) == int(result), r["id"]
            context = _numbers(r["prompt"]) | {
                int(STEP.search(s).group(4)) for s in r["completions"][:fe]}
            assert {int(a), int(b)} & context, r["id"]
        elif r["error_type"] == "skipped_step":
            # every written step computes right; one computation is missing
            for step in r["completions"][:-1]:
                a, op, b, result = STEP.search(step).groups()
                assert OPS[op](int(a), int(b)) == int(result), (r["id"], step)
            final = int(r["completions"][-1].removeprefix("So the answer is ").rstrip("."))
            assert final != r["answer"], r["id"]


def test_regenerating_gives_identical_files(tmp_path):
    paths = write_prm_dataset(tmp_path)
    for name, path in paths.items():
        assert path.read_bytes() == (DATA / f"{name}.jsonl").read_bytes(), name
    again = write_prm_dataset(tmp_path / "again")
    assert all(again[n].read_bytes() == paths[n].read_bytes() for n in paths)


def test_generator_is_seeded_and_sized():
    a = tp.prm.generate_prm_dataset("train", n=20, seed=1)
    assert a == tp.prm.generate_prm_dataset("train", n=20, seed=1)
    assert a != tp.prm.generate_prm_dataset("train", n=20, seed=2)
    assert len(a) == 20


def test_loader_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown split"):
        tp.load_prm_dataset("validation")
    with pytest.raises(FileNotFoundError):
        tp.load_prm_dataset("test", path=tmp_path / "missing.jsonl")


def test_module_entry_point_writes_the_data_and_finds_the_scripts(tmp_path, capsys):
    from tokpool.prm.__main__ import SCRIPTS, main, script_path

    main(["make-data", "--out", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dev.jsonl", "hard.jsonl", "test.jsonl", "train.jsonl"]
    assert "hard:" in capsys.readouterr().out
    for command, file in SCRIPTS.items():  # the training scripts live in scripts/, not the package
        assert script_path(command).name == file and script_path(command).is_file()
