"""The node contract: identities known in advance, the config peerlab's node shares, the schemas a
foreign node's log is checked against."""
import json
import subprocess

import jsonschema
import pytest

from node import contract
from node.adapters import ADAPTERS, IMPLEMENTATIONS, get_adapter
from node.config import NodeConfig


def test_peer_id_is_libp2ps_for_the_seed():
    # js-libp2p's peerIdFromPrivateKey(generateKeyPairFromSeed('Ed25519', seed)) for this seed
    seed = contract.identity_seed(1, "n0")
    assert contract.peer_id(seed) == "12D3KooWPDH5KR1fxhi3x3dXwKjFe6iuxTWMZJyiwYL3cFXdpdkE"
    assert contract.identity_seed(1, "n0") == seed != contract.identity_seed(2, "n0") != contract.identity_seed(1, "n1")


def test_peer_ids_agree_with_js_libp2p(tmp_path):
    adapter = get_adapter("js-libp2p")
    assert not adapter.missing(), f"the js-libp2p adapter is not installed ({adapter.missing()[0]}): make adapters"
    script = adapter.directory / ".peer-id-check.mjs"
    script.write_text("import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'\n"
                      "import { peerIdFromPrivateKey } from '@libp2p/peer-id'\n"
                      "for (const seed of process.argv.slice(2)) console.log(peerIdFromPrivateKey("
                      "await generateKeyPairFromSeed('Ed25519', Buffer.from(seed, 'hex'))).toString())\n")
    try:
        seeds = [contract.identity_seed(s, f"n{i}") for s in (3, 9) for i in range(3)]
        out = subprocess.run([adapter.argv("x")[0], str(script), *seeds], capture_output=True, text=True, check=True)
    finally:
        script.unlink()
    assert out.stdout.split() == [contract.peer_id(s) for s in seeds]


def test_peerlab_node_config_is_a_contract_config():
    assert issubclass(NodeConfig, contract.ContractConfig)
    assert set(contract.ContractConfig.model_fields) <= set(NodeConfig.model_fields)
    assert IMPLEMENTATIONS[0] == "peerlab" and "js-libp2p" in ADAPTERS


def test_config_schema_accepts_a_config_and_names_a_missing_field():
    cfg = contract.ContractConfig(run_id="r", node_id="n1", protocol="gossipsub", implementation="js-libp2p",
                                  listen=contract.Address(host="10.0.0.3", port=4001), event_log="/tmp/x",
                                  schedule=[(1.0, "t0", 100)], t0_ns=5)
    schema = contract.config_schema()
    jsonschema.validate(json.loads(cfg.model_dump_json()), schema)
    broken = json.loads(cfg.model_dump_json())
    del broken["listen"]
    with pytest.raises(jsonschema.ValidationError, match="listen"):
        jsonschema.validate(broken, schema)


def _log(*events: dict) -> list[str]:
    base = [{"type": "start", "protocol": "gossipsub"}, {"type": "ready"}, {"type": "t0", "t0": 1},
            {"type": "join", "topic": "t0"}, {"type": "connect", "peer": "n2", "outbound": True},
            {"type": "stop", "reason": "SIGTERM"}]
    return [json.dumps({"ts": 1, "node": "n1", **e}) for e in [*base, *events]]


def test_a_conforming_log_passes_and_each_kind_of_mistake_is_named():
    assert contract.check_log(_log({"type": "deliver_message", "topic": "t0", "msg_id": "n0-1", "origin": "n0",
                                    "peer": "n2", "size": 100})) == []
    # a required field missing, a wrong type, an unknown event, a required event never written
    problems = contract.check_log(_log({"type": "deliver_message", "topic": "t0", "msg_id": "n0-1", "peer": "n2",
                                        "size": 100}))
    assert any("'origin' is a required property" in p for p in problems)
    problems = contract.check_log(_log({"type": "publish_message", "topic": "t0", "msg_id": "n1-1", "size": "big",
                                        "seq": 1}))
    assert any("size" in p and "integer" in p for p in problems)
    assert any("unknown event type 'hello'" in p for p in contract.check_log(_log({"type": "hello"})))
    # every optional event docs/node-contract.md lists is one: a refused publish (a restarted rust-libp2p
    # node that publishes before its peers know its subscription) is not a mistake
    assert contract.check_log(_log({"type": "publish_refused", "topic": "t0", "msg_id": "n1-1",
                                    "reason": "NoPeersSubscribedToTopic"})) == []
    assert "no 'ready' event" in contract.check_log([line for line in _log() if '"ready"' not in line])


def test_peerlab_cli_checks_a_log(tmp_path):
    from orchestrator.cli import main

    good = tmp_path / "n1.jsonl"
    good.write_text("\n".join(_log()) + "\n")
    assert main(["contract", "check", str(good)]) == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(_log({"type": "join"})) + "\n")
    assert main(["contract", "check", str(bad)]) == 1


def test_the_adapters_lock_file_pins_every_package():
    lock = json.loads((get_adapter("js-libp2p").directory / "package-lock.json").read_text())
    packages = {k: v for k, v in lock["packages"].items() if k}
    assert packages and all(v.get("integrity", "").startswith("sha512-") for v in packages.values())
    pkg = json.loads((get_adapter("js-libp2p").directory / "package.json").read_text())
    assert all(version[0].isdigit() for version in pkg["dependencies"].values())  # exact versions, no ranges
