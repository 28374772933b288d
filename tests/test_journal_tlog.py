"""The journal as an RFC 6962 Merkle log, checked against an implementation nobody here wrote.

The oracle is tests/tlog_oracle (Go's ``golang.org/x/mod/sumdb/tlog`` and ``sumdb/note`` from
Debian's golang-golang-x-mod-dev, built offline once per test session): it must accept the
checkpoint's signature, origin, size and root and every inclusion and consistency proof
``agentteam-replay prove`` makes, for journals written by the demo, by a long concurrent run that
rolls over, by segmented pools (a pruned first segment too) and across a key rotation, at random
seqs and random checkpoint pairs; a flipped bit in a proof, a leaf or a root is refused by it and
by ``check-proof``. The standard 8-leaf test tree of RFC 6962 implementations gives the vectors.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import pytest
import trio

from agentteam_task_bridge import journal
from agentteam_task_bridge.journal import CallReceived, CallResult, Event, SessionEnded

from .journal_helpers import KEY, SAMPLE_PAYLOADS, VKEY, event_leaves_file
from .journal_helpers.segmented import files_of, write_segmented
from .replay_helpers import replay_cli, replay_main

ORACLE_SOURCE: Final = Path(__file__).parent / "tlog_oracle"
GOCODE: Final = Path("/usr/share/gocode")

# The test tree of RFC 6962 implementations (certificate-transparency, Trillian, Go): its
# leaves and the tree hash of each prefix.
VECTOR_LEAVES: Final = (
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
)
VECTOR_ROOTS: Final = (
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
)
# Inclusion proofs in the 8-leaf tree as RFC 9162's examples and CT's tests list them.
VECTOR_PATH_0_OF_8: Final = (
    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
)


@pytest.fixture(scope="session")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None or not (GOCODE / "src/golang.org/x/mod/sumdb/tlog").is_dir():
        pytest.skip(
            "the Go oracle needs golang-go and golang-golang-x-mod-dev "
            "(apt-get install golang-go golang-golang-x-mod-dev; .ci/run installs them)"
        )
    built = tmp_path_factory.mktemp("tlog-oracle") / "tlog_oracle"
    env = {
        **os.environ,
        "GOPATH": str(GOCODE),
        "GO111MODULE": "off",
        "GOFLAGS": "",
        "GOCACHE": str(built.parent / "cache"),
        "CGO_ENABLED": "0",
    }
    subprocess.run(
        [go, "build", "-o", str(built), "."], cwd=ORACLE_SOURCE, env=env, check=True, timeout=600
    )
    return built


def _oracle(oracle: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(oracle), *args], capture_output=True, text=True, timeout=60, check=False
    )


# --- the vectors ------------------------------------------------------------------------------


def _vector_tree() -> tuple[list[bytes], journal.Frontier]:
    stored: list[bytes] = []
    tree = journal.Frontier()
    for leaf in VECTOR_LEAVES:
        stored += tree.append(journal.leaf_hash(bytes.fromhex(leaf)))
    return stored, tree


def test_the_rfc6962_test_tree_hashes_and_proofs() -> None:
    stored, _ = _vector_tree()

    def read(indexes: Any) -> list[bytes]:
        return [stored[i] for i in indexes]

    assert [journal.tree_hash(n, read).hex() for n in range(1, 9)] == list(VECTOR_ROOTS)
    assert (
        journal.tree_hash(0, read)
        == journal.EMPTY_ROOT
        == bytes.fromhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    )
    assert [h.hex() for h in journal.inclusion_proof(0, 8, read)] == list(VECTOR_PATH_0_OF_8)
    roots = [bytes.fromhex(r) for r in VECTOR_ROOTS]
    for size in range(1, 9):
        for index in range(size):
            leaf = journal.leaf_hash(bytes.fromhex(VECTOR_LEAVES[index]))
            path = journal.inclusion_proof(index, size, read)
            assert journal.verify_inclusion(index, size, leaf, path, roots[size - 1])
            assert not journal.verify_inclusion(index, size, leaf, [*path, leaf], roots[size - 1])
            for i in range(len(path)):
                assert not journal.verify_inclusion(
                    index, size, leaf, _flip(path, i), roots[size - 1]
                )
        for old in range(1, size + 1):
            proof = journal.consistency_proof(old, size, read)
            assert journal.verify_consistency(old, size, roots[old - 1], roots[size - 1], proof)
            for i in range(len(proof)):
                assert not journal.verify_consistency(
                    old, size, roots[old - 1], roots[size - 1], _flip(proof, i)
                )
            if old < size:
                wrong = _flip([roots[old - 1]], 0)[0]
                assert not journal.verify_consistency(old, size, wrong, roots[size - 1], proof)


def test_go_tlog_computes_the_same_roots_and_proofs(oracle: Path) -> None:
    done = _oracle(oracle, "roots", *VECTOR_LEAVES)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == list(VECTOR_ROOTS)
    stored, _ = _vector_tree()

    def read(indexes: Any) -> list[bytes]:
        return [stored[i] for i in indexes]

    done = _oracle(oracle, "proofs", *VECTOR_LEAVES)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 8 * 9  # every inclusion (36) and consistency (36) proof
    for line in lines:
        kind, a, b, *rest = line.split(" ")
        theirs = rest[0].split(",") if rest and rest[0] else []
        size, other = int(a), int(b)
        ours = (
            journal.inclusion_proof(other, size, read)
            if kind == "inclusion"
            else journal.consistency_proof(other, size, read)
        )
        assert [h.hex() for h in ours] == theirs, line


# --- proofs of real journals ------------------------------------------------------------------


def _flip(hashes: list[bytes], i: int, bit: int = 0) -> list[bytes]:
    out = list(hashes)
    out[i] = bytes([out[i][0] ^ (1 << bit), *out[i][1:]])
    return out


def _flip_b64(text: str, bit: int) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[(bit // 8) % len(raw)] ^= 1 << (bit % 8)
    return base64.b64encode(bytes(raw)).decode()


def _prove(path: Path, *args: str) -> dict[str, Any]:
    done = replay_main("prove", path, *args, "--json")
    assert done.returncode == 0, done.stderr + done.stdout
    proof: dict[str, Any] = json.loads(done.stdout)
    return proof


def _check(oracle: Path, proof: dict[str, Any], where: Path, vkeys: list[str]) -> tuple[bool, bool]:
    """(Go accepts it, check-proof accepts it)."""
    where.write_text(json.dumps(proof))
    go = _oracle(oracle, "check", ",".join(vkeys), str(where))
    keys = [arg for vkey in vkeys for arg in ("--trusted-key", vkey)]
    ours = replay_main("check-proof", where, *keys)
    assert ours.returncode in (0, 1), ours.stderr
    return go.returncode == 0, ours.returncode == 0


def _corruptions(proof: dict[str, Any], rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    """The proof with one bit flipped in a proof hash, the leaf, the root, the signed note."""
    out: list[tuple[str, dict[str, Any]]] = []
    bit = rng.randrange(256)
    if "consistency_proof" in proof:
        if proof["consistency_proof"]:
            hashes = list(proof["consistency_proof"])
            i = rng.randrange(len(hashes))
            hashes[i] = _flip_b64(hashes[i], bit)
            out.append(("proof hash", {**proof, "consistency_proof": hashes}))
        out.append(("old root", {**proof, "old_root": _flip_b64(proof["old_root"], bit)}))
        out.append(("new root", {**proof, "new_root": _flip_b64(proof["new_root"], bit)}))
        return out
    if proof["inclusion_proof"]:
        hashes = list(proof["inclusion_proof"])
        i = rng.randrange(len(hashes))
        hashes[i] = _flip_b64(hashes[i], bit)
        out.append(("proof hash", {**proof, "inclusion_proof": hashes}))
    leaf = bytearray(base64.b64decode(proof["leaf"]))
    leaf[rng.randrange(len(leaf))] ^= 1 << rng.randrange(8)
    out.append(("leaf", {**proof, "leaf": base64.b64encode(bytes(leaf)).decode()}))
    out.append(("root", {**proof, "root_hash": _flip_b64(proof["root_hash"], bit)}))
    body, _, signature = proof["checkpoint"].rpartition("\n\n")
    origin, size, root = body.split("\n")
    forged = f"{origin}\n{size}\n{_flip_b64(root, bit)}\n\n{signature}"
    out.append(("signed root", {**proof, "checkpoint": forged, "root_hash": _flip_b64(root, bit)}))
    return out


def _exercise(
    oracle: Path,
    path: Path,
    vkeys: list[str],
    work: Path,
    *,
    seqs: int = 8,
    pairs: int = 6,
    corrupt: int = 2,
    seed: int = 0,
) -> int:
    """Prove random seqs and random checkpoint pairs of the journal at ``path``; Go and
    check-proof accept each, and refuse ``corrupt`` of them with a flipped bit. Returns the
    number of proofs checked."""
    rng = random.Random(seed)
    files = [p for _, p in journal.segment_files(journal.base_path(path))]
    readers = [journal.open_reader(f) for f in files]
    try:
        first = min(r.segment.first_seq for r in readers)
        head = max(r.head()[0] for r in readers)
        sizes = sorted({cp.seq for r in readers for cp in r.checkpoints() if cp.root_hash})
    finally:
        for reader in readers:
            reader.close()
    assert head > 0 and len(sizes) >= 2, sizes
    proofs: list[dict[str, Any]] = []
    for seq in sorted({first, sizes[-1], *(rng.randint(first, sizes[-1]) for _ in range(seqs))}):
        proofs.append(_prove(path, "--seq", str(seq)))
    for _ in range(pairs):
        old, new = sorted(rng.sample(sizes, 2))
        if old >= first - 1:
            proofs.append(_prove(path, "--consistency", str(old), str(new)))
    for i, proof in enumerate(proofs):
        where = work / f"proof-{i}.json"
        assert _check(oracle, proof, where, vkeys) == (True, True), proof
        if "tree_size" in proof:
            assert proof["tree_size"] in sizes
        if i < corrupt or i == len(proofs) - 1:
            for what, bad in _corruptions(proof, rng):
                assert _check(oracle, bad, where, vkeys) == (False, False), what
    return len(proofs)


@pytest.mark.slow  # two demo runs as subprocesses, then a proof at each random seq and pair
def test_go_accepts_the_demos_journal_and_refuses_a_flipped_bit(
    oracle: Path, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }
    path = tmp_path / "demo.db"
    done = subprocess.run(
        [sys.executable, "-m", "agentteam_task_bridge.cli", "demo", "--journal", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for _ in range(1):  # a second session: more checkpoints, pairs to prove between
        done = subprocess.run(
            [sys.executable, "-m", "agentteam_task_bridge.cli", "demo", "--journal", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0
    key = journal.load_key(tmp_path / "config" / "agentteam-bridge" / "journal-signing.key")
    vkey = key.verifier.to_text()
    assert _exercise(oracle, path, [vkey], tmp_path, corrupt=3) >= 8
    # A call, every event of it under one checkpoint; over the wire, the console module.
    with journal.open_reader(path) as reader:
        call = next(r.call_id for r in reader.events(kind="call_result") if r.call_id)
    done = replay_cli("prove", path, "--call", call, "--json")
    assert done.returncode == 0, done.stderr
    proof = json.loads(done.stdout)
    assert proof["call_id"] == call and len(proof["events"]) >= 3
    assert _check(oracle, proof, tmp_path / "call.json", [vkey]) == (True, True)
    # A leaf shows the envelope and the payload's salted digest, never the payload.
    leaf = json.loads(base64.b64decode(proof["events"][0]["leaf"]))
    assert leaf["call_id"] == call and len(leaf["payload_sha256"]) == 64 and "payload" not in leaf
    # The same, checked by a person: one line that says OK, exit 0; a stranger's key fails.
    (tmp_path / "call.json").write_text(json.dumps(proof))
    done = replay_cli("check-proof", tmp_path / "call.json", "--trusted-key", vkey)
    assert done.returncode == 0 and done.stdout.startswith("OK: inclusion of"), done.stdout
    # --output writes the file owner-only, whatever the umask.
    written = tmp_path / "seq-1.proof.json"
    mask = os.umask(0)
    try:
        done = replay_main("prove", path, "--seq", "1", "--output", written)
    finally:
        os.umask(mask)
    assert done.returncode == 0 and stat.S_IMODE(written.stat().st_mode) == 0o600
    assert replay_main("check-proof", written, "--trusted-key", vkey).returncode == 0
    stranger = journal.SigningKey("example/stranger", bytes(32)).verifier.to_text()
    done = replay_cli("check-proof", tmp_path / "call.json", "--trusted-key", stranger)
    assert done.returncode == 1 and "not a trusted key" in done.stdout


def _concurrent_run(path: Path, *, tasks: int, calls: int) -> None:
    """Tasks appending whole calls at once through the trio writer, which checkpoints and
    rolls over (segment_started built while earlier rows still wait in its queue)."""

    async def main() -> None:
        async with journal.open_writer(
            path, key=KEY, checkpoint_every=97, segment_bytes=192 * 1024, max_batch=16
        ) as writer:

            async def worker(t: int) -> None:
                for i in range(calls):
                    call = f"t{t}-c{i}"
                    await writer.append(
                        Event(
                            session_id=f"s{t}",
                            call_id=call,
                            payload=CallReceived(arguments={"i": i, "pad": "𝄞" * (i % 300)}),
                        ),
                        durable=i % 7 == 0,
                    )
                    await writer.append(
                        Event(session_id=f"s{t}", call_id=call, payload=CallResult(result=i)),
                        durable=False,
                    )

            async with trio.open_nursery() as nursery:
                for t in range(tasks):
                    nursery.start_soon(worker, t)

    trio.run(main)


@pytest.mark.slow  # 4,000 events from 8 tasks through the trio writer, rolling over
def test_go_accepts_a_long_concurrent_run_that_rolled_over(oracle: Path, tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    _concurrent_run(path, tasks=8, calls=250)
    assert len(files_of(path)) >= 2, "the run rolled over"
    report = journal.verify(files_of(path)[-1], key=KEY)  # the live segment, from its border
    assert report.ok and report.log_version == 2, report.findings
    assert _exercise(oracle, path, [VKEY.to_text()], tmp_path, seqs=12, pairs=10, seed=1) >= 12


def test_go_accepts_segmented_pools_and_a_pruned_first_segment(
    oracle: Path, tmp_path: Path
) -> None:
    pool = tmp_path / "pool"
    pool.mkdir()
    path = pool / "journal-1.db"
    write_segmented(path, 40)
    write_segmented(path, 40, start=40)
    files = files_of(path)
    assert len(files) >= 3
    _exercise(oracle, path, [VKEY.to_text()], tmp_path, seqs=10, pairs=8, seed=2)
    # The first segment gone (as prune removes it): later events still prove, from the border
    # each later segment copied when it began.
    with journal.open_reader(files[1]) as reader:
        start = reader.segment.first_seq
    for suffix in ("", "-wal", "-shm"):
        Path(f"{files[0]}{suffix}").unlink(missing_ok=True)
    proof = _prove(files[-1], "--seq", str(start + 1))
    assert _check(oracle, proof, tmp_path / "after-prune.json", [VKEY.to_text()]) == (True, True)
    done = replay_main("prove", files[-1], "--seq", "1", "--json")
    assert done.returncode == 2 and "pruned" in done.stderr


def test_go_accepts_a_pool_begun_with_its_leaves_aside_and_rolled_over_since(
    oracle: Path, tmp_path: Path
) -> None:
    """A v2 file made before schema 10 keeps its leaf columns in event_leaves, whoever writes
    it later; the segments it rolls over into keep them in the events row. Both verify, prove
    (Go accepts), erase, and say which they are."""
    pool = tmp_path / "pool"
    pool.mkdir()
    path = event_leaves_file(pool / "journal-1.db")
    write_segmented(path, 40)
    write_segmented(path, 40, start=40)
    files = files_of(path)
    assert len(files) >= 3
    counts = []
    for file in files:
        conn = sqlite3.connect(file)
        try:
            counts.append(
                conn.execute(
                    "SELECT count(*), count(salt), (SELECT count(*) FROM event_leaves) FROM events"
                ).fetchone()
            )
        finally:
            conn.close()
    first, *later = counts
    assert first[0] > 0 and first[1] == 0 and first[2] == first[0]  # aside, as before
    assert all(n > 0 and salts == n and aside == 0 for n, salts, aside in later)
    with journal.open_reader(files[0]) as reader:
        assert reader.leaf_store == "event_leaves"
    with journal.open_reader(files[-1]) as reader:
        assert reader.leaf_store == "events"
    _exercise(oracle, path, [VKEY.to_text()], tmp_path, seqs=10, pairs=8, seed=4)
    done = replay_main("verify", pool, "--trusted-key", VKEY.to_text(), "--json")
    out = json.loads(done.stdout)["journals"][0]
    assert done.returncode == 0 and out["log_version"] == 2, done.stdout
    assert out["leaf_store"] == "mixed"
    text = replay_main("verify", pool, "--trusted-key", VKEY.to_text())
    said = " ".join(text.stdout.split())  # as the console wrapped it
    assert "leaves in event_leaves in older files, the events row in newer ones" in said
    # Erasure in both stores, every proof intact.
    erased = journal.erase_payloads(
        path,
        journal.EraseSelector(session_id="s0"),
        reason="test",
        key=journal.SigningKey("agentteam-bridge/seed", KEY),
    )
    assert erased.seqs[0] <= first[0] < erased.seqs[-1]  # in both stores
    done = replay_main("verify", pool, "--trusted-key", VKEY.to_text(), "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["journals"][0]["erased_seqs"]
    _exercise(oracle, path, [VKEY.to_text()], tmp_path, seqs=6, pairs=4, seed=5)


def test_go_accepts_proofs_across_a_key_rotation(oracle: Path, tmp_path: Path) -> None:
    path = tmp_path / "rotated.db"
    old = journal.SigningKey("agentteam-bridge/old", bytes(range(1, 33)))
    new = journal.SigningKey("agentteam-bridge/new", bytes(range(2, 34)))
    for key, start in ((old, 0), (new, 30), (new, 60)):
        with journal.open_sync_writer(path, key=key, checkpoint_every=11) as writer:
            for i in range(start, start + 30):
                writer.append(
                    Event(session_id="s", call_id=f"c{i}", payload=CallReceived(arguments={"i": i}))
                )
    with journal.open_reader(path) as reader:
        signers = {cp.key_id for cp in reader.checkpoints()}
    assert signers == {old.key_id, new.key_id}
    vkeys = [old.verifier.to_text(), new.verifier.to_text()]
    _exercise(oracle, path, vkeys, tmp_path, seqs=8, pairs=8, seed=3)
    # One seq proved under the old key's checkpoint (held), the pair across the rotation.
    with journal.open_reader(path) as reader:
        held = next(cp for cp in reader.checkpoints() if cp.key_id == old.key_id and cp.seq > 3)
    held_file = tmp_path / "held.note"
    held_file.write_text(held.note())
    proof = _prove(path, "--seq", "3", "--checkpoint", str(held_file))
    assert proof["tree_size"] == held.seq
    assert _check(oracle, proof, tmp_path / "held.json", vkeys[:1]) == (True, True)
    assert _check(oracle, proof, tmp_path / "held.json", vkeys[1:]) == (False, False)


# --- the log itself ---------------------------------------------------------------------------


def test_each_event_stores_its_leaf_and_about_two_hashes(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    with journal.open_sync_writer(path, key=KEY) as writer:
        for i in range(1000):
            writer.append(
                Event(session_id="s", payload=SessionEnded(reason=f"r{i}")), durable=False
            )
    conn = sqlite3.connect(path)
    try:
        events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        salts = [r[0] for r in conn.execute("SELECT salt FROM events")]
        stored = conn.execute("SELECT sum(length(tree_hashes)) / 32 FROM events").fetchone()
        meta = dict(conn.execute("SELECT key, value FROM journal_meta"))
        aside = conn.execute("SELECT count(*) FROM event_leaves").fetchone()
    finally:
        conn.close()
    assert meta["merkle_log"] == "rfc6962"
    # Made since 0010: the leaf columns are in the events row (one B-tree insert per event).
    assert meta["leaf_store"] == "events" and aside == (0,)
    assert len(salts) == events and len(set(salts)) == events  # a fresh salt per event
    assert all(len(bytes.fromhex(s)) == 16 for s in salts)
    # Go tlog's layout: its StoredHashCount, under two per event.
    assert stored[0] == journal.stored_index_of(events + 1) <= 2 * events


def test_a_journal_written_before_the_merkle_log_stays_v1_and_verifies(tmp_path: Path) -> None:
    from sqlite_utils import Database

    from agentteam_task_bridge.journal._schema import migrations

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    migrations().apply(Database(conn), stop_before="0006_merkle_log")  # as version 5 made it
    conn.execute("INSERT INTO journal_meta VALUES ('journal_id', 'old-journal')")
    conn.close()
    for _ in range(2):  # new sessions on the old file: migrated, still a chain only
        with journal.open_sync_writer(path, key=KEY) as writer:
            writer.append(Event(session_id="s", payload=SAMPLE_PAYLOADS["session_started"]))
    report = journal.verify(path, key=KEY)
    assert report.ok and report.log_version == 1 and report.signatures_checked >= 2
    done = replay_main("verify", path, "--trusted-key", VKEY.to_text(), "--json")
    out = json.loads(done.stdout)
    assert out["journals"][0]["log_version"] == 1, done.stderr
    assert out["journals"][0]["leaf_store"] is None
    text = replay_main("verify", path, "--trusted-key", VKEY.to_text())
    assert "v1: chain only, no proofs" in text.stdout
    done = replay_main("prove", path, "--seq", "1", "--json")
    assert done.returncode == 2 and "v1 journal (chain only, no proofs)" in done.stderr
    new = tmp_path / "new.db"
    with journal.open_sync_writer(new, key=KEY) as writer:
        writer.append(Event(session_id="s", payload=SAMPLE_PAYLOADS["session_started"]))
    text = replay_main("verify", new, "--trusted-key", VKEY.to_text())
    assert "v2: Merkle log (RFC 6962), proofs" in text.stdout
    done = replay_main("verify", new, "--trusted-key", VKEY.to_text(), "--json")
    assert json.loads(done.stdout)["journals"][0]["leaf_store"] == "events"  # the events row
    assert journal.verify(new, key=KEY).leaf_store == "events"


def test_a_rewritten_tree_fails_at_the_next_signed_root(tmp_path: Path) -> None:
    """Whoever edits a payload and rewrites its leaf digest and every stored hash consistently
    still cannot match the signed root."""
    path = tmp_path / "j.db"
    with journal.open_sync_writer(path, key=KEY, checkpoint_every=10) as writer:
        for i in range(25):
            writer.append(Event(session_id="s", payload=SessionEnded(reason=f"r{i}")))
    conn = sqlite3.connect(path, isolation_level=None)
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
        conn.execute(f"DROP TRIGGER {name}")
    cols = ", ".join(journal.COLUMNS)
    rows = [list(r) for r in conn.execute(f"SELECT {cols} FROM events ORDER BY seq")]
    salts = dict(conn.execute("SELECT seq, salt FROM events"))
    rows[6][14] = '{"calls":0,"reason":"forged"}'
    for i in range(6, len(rows)):
        rows[i][15] = rows[i - 1][16]
        rows[i][16] = journal.row_hash(tuple(rows[i]))
    tree = journal.Frontier()
    for row in rows:
        digest = journal.payload_digest(bytes.fromhex(salts[row[0]]), row[14])
        stored = b"".join(tree.append(journal.leaf_hash(journal.leaf_bytes(row, digest))))
        conn.execute(
            "UPDATE events SET payload = ?, prev_hash = ?, hash = ?, payload_sha256 = ?,"
            " tree_hashes = ? WHERE seq = ?",
            (row[14], row[15], row[16], digest, stored, row[0]),
        )
    conn.close()
    found = [(f.seq, f.rule) for f in journal.verify(path, key=KEY).findings]
    # The chain, leaves and stored tree agree; every signed checkpoint after the edit does not.
    assert {rule for _, rule in found} == {"checkpoint_root_mismatch", "checkpoint_hash_mismatch"}
    assert {seq for seq, rule in found if rule == "checkpoint_root_mismatch"} == {10, 20, 25}
    done = replay_main("prove", path, "--seq", "3", "--json")
    assert done.returncode == 1 and "not the checkpoint's signed root" in done.stderr
