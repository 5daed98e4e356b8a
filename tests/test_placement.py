"""The placement planner on synthetic devices (no GPU, no llama.cpp needed).

Every plan is checked against the budgets it must respect (each device's free memory less
the 1 GiB margin, the host's RAM, unified memory counted once for both) and, for `auto`,
for maximality: one more layer would not fit. Model shapes are those of the issue's
example: a Qwen2.5-32B-like Q4_K_M target of 19.8 GB and a 1.5B-like draft of 1.1 GB.
"""

from __future__ import annotations

import pytest

from localspec.placement.plan import (
    MARGIN,
    Device,
    GiB,
    Layout,
    Need,
    Placement,
    PlacementError,
    Request,
    assign_layers,
    plan,
    usage,
)

GB = 10**9


def layout(name: str, total: int, n_layer: int, n_embd: int, n_ff: int, n_head: int, n_kv: int,
           n_vocab: int = 152064, embd_share: float = 0.022, tied: bool = False) -> Layout:
    embd = int(total * embd_share)
    out = embd if tied else int(embd * 1.5)
    per = (total - embd - out) // n_layer
    return Layout(name=name, n_layer=n_layer, layer_bytes=(per,) * n_layer, input_bytes=embd,
                  output_bytes=out, kv_bytes_per_token=n_kv * 256 * 2, n_embd=n_embd, n_ff=n_ff,
                  n_head=n_head, n_vocab=n_vocab)


TARGET = layout("qwen32b-q4_k_m.gguf", int(19.8 * GB), 64, 5120, 27648, 40, 8)
DRAFT = layout("qwen1.5b-q4_k_m.gguf", int(1.1 * GB), 28, 1536, 8960, 12, 2, embd_share=0.18, tied=True)
HOST64 = Device("CPU", "cpu", 64 * GiB, 64 * GiB, "CPU")


def card(name: str, total_gib: float, used_gib: float = 0.4) -> Device:
    return Device(name, "gpu", int((total_gib - used_gib) * GiB), int(total_gib * GiB), "CUDA")


DEFAULT_NEED = Need()
AUTO_TARGET, AUTO_DRAFT = Request("target"), Request("draft")


def pair(devices, need=DEFAULT_NEED, target=AUTO_TARGET, draft=AUTO_DRAFT) -> tuple[Placement, Placement]:
    t, d = plan(devices, [(TARGET, need, target), (DRAFT, need, draft)])
    check_budgets(devices, [(TARGET, need, t), (DRAFT, need, d)])
    return t, d


def check_budgets(devices, placed) -> None:
    """Every device within free - margin; the host within total - margin (+ unified use)."""
    host = next(d for d in devices if d.kind == "cpu")
    used: dict[str, int] = {}
    for _, _, p in placed:
        for dev, b in p.memory.items():
            used[dev] = used.get(dev, 0) + b
    for d in devices:
        if d.kind != "cpu":
            assert used.get(d.name, 0) <= d.free - MARGIN, (d.name, used.get(d.name, 0) / GiB)
    unified = sum(used.get(d.name, 0) for d in devices if d.unified)
    assert used.get(host.name, 0) + unified <= host.total - MARGIN
    for lay, _, p in placed:  # the plan's layer counts are what llama.cpp's split rule gives
        assert sum(p.layers.values()) == lay.n_layer + 1 == p.n_layers
        if p.n_gpu_layers:
            got = assign_layers(lay.n_layer, p.n_gpu_layers, p.tensor_split or [1.0])
            counts = {name: sum(1 for a in got if a == i) for i, name in enumerate(p.devices)}
            assert counts == {name: p.layers[name] for name in p.devices}


def one_more_does_not_fit(devices, p: Placement, need=DEFAULT_NEED) -> None:
    """Maximality of an auto plan: the target with one more GPU layer must not fit."""
    if p.n_gpu_layers >= p.n_layers:
        return
    fixed = Request("draft", gpu_layers="all")  # the draft as planned (fully on the GPU)
    with pytest.raises(PlacementError):
        plan(devices, [(DRAFT, need, fixed), (TARGET, need, Request("target", gpu_layers=p.n_gpu_layers + 1))])


def test_24gb_card_fits_both_at_4k_and_keeps_the_draft_whole_at_32k():
    gpu = card("CUDA0", 24)
    t, d = pair([HOST64, gpu])
    assert d.n_gpu_layers == d.n_layers and d.layers == {"CUDA0": 29, "CPU": 0}
    assert t.n_gpu_layers == t.n_layers, t.summary()  # 19.8 GB + 1 GiB KV + draft fit in 22.6 GiB
    # a 32k context needs 8 GiB of target KV: both cannot fit, the draft stays whole
    long = Need(n_ctx=32768)
    t, d = pair([HOST64, gpu], need=long)
    assert d.n_gpu_layers == d.n_layers
    assert 0 < t.n_gpu_layers < t.n_layers and t.layers["CPU"] == t.n_layers - t.n_gpu_layers
    assert t.devices == ("CUDA0",) and t.tensor_split is None
    one_more_does_not_fit([HOST64, gpu], t, long)


def test_8gb_card_draft_first_target_split_with_the_cpu():
    gpu = card("CUDA0", 8)
    t, d = pair([HOST64, gpu])
    assert d.n_gpu_layers == d.n_layers
    assert 5 < t.n_gpu_layers < 30, t.summary()
    assert t.summary() == f"CUDA0 {t.n_gpu_layers} + CPU {65 - t.n_gpu_layers} of 65 layers"
    one_more_does_not_fit([HOST64, gpu], t)
    # without the draft the target gets more of the card
    (alone,) = plan([HOST64, gpu], [(TARGET, Need(), Request("target"))])
    assert alone.n_gpu_layers > t.n_gpu_layers


def test_two_cards_share_the_target_by_layer_counts():
    devices = [HOST64, card("CUDA0", 12), card("CUDA1", 12)]
    t, d = pair(devices)
    assert d.layers["CUDA0"] == d.n_layers  # the draft fills the first card first
    assert t.n_gpu_layers == t.n_layers and t.devices == ("CUDA0", "CUDA1")
    assert t.tensor_split == (float(t.layers["CUDA0"]), float(t.layers["CUDA1"]))
    assert t.layers["CUDA1"] > t.layers["CUDA0"]  # the first card also holds the draft


def test_explicit_tensor_split_and_single_gpu_mode():
    devices = [HOST64, card("CUDA0", 24), card("CUDA1", 24)]
    (t,) = plan(devices, [(TARGET, Need(), Request("target", gpu_layers=40, tensor_split=(3.0, 1.0)))])
    assert t.n_gpu_layers == 40 and t.layers == {"CUDA0": 30, "CUDA1": 10, "CPU": 25}
    (t,) = plan(devices, [(TARGET, Need(), Request("target", split_mode="none", main_gpu=1))])
    assert t.devices == ("CUDA1",) and t.layers["CUDA1"] == t.n_gpu_layers == 65
    with pytest.raises(PlacementError, match="--main-gpu 2"):
        plan(devices, [(TARGET, Need(), Request("target", split_mode="none", main_gpu=2))])


def test_mac_unified_memory_counts_gpu_and_cpu_against_the_same_ram():
    # a 32 GB Apple-silicon Mac: Metal's working set is ~2/3 of RAM, and it IS the RAM
    mac = [Device("CPU", "cpu", 32 * GiB, 32 * GiB, "CPU"),
           Device("MTL0", "gpu", int(21.3 * GiB), int(21.3 * GiB), "MTL", unified=True)]
    t, d = pair(mac)
    assert d.n_gpu_layers == d.n_layers
    assert 40 < t.n_gpu_layers < t.n_layers, t.summary()
    one_more_does_not_fit(mac, t)
    # a 16 GB Mac: the 19.8 GB target does not fit in its RAM at all, wherever it goes
    small = [Device("CPU", "cpu", 16 * GiB, 16 * GiB, "CPU"),
             Device("MTL0", "gpu", int(10.7 * GiB), int(10.7 * GiB), "MTL", unified=True)]
    with pytest.raises(PlacementError, match="host RAM.*smaller --ctx or a smaller quantization"):
        pair(small)


def test_nothing_fits_names_the_flags():
    devices = [Device("CPU", "cpu", 16 * GiB, 16 * GiB, "CPU"), card("CUDA0", 4)]
    with pytest.raises(PlacementError) as e:
        pair(devices)
    msg = str(e.value)
    assert "target qwen32b" in msg and "host RAM" in msg and "--ctx" in msg and "\n" not in msg


def test_explicit_ngl_is_obeyed_or_refused_with_the_flag():
    devices = [HOST64, card("CUDA0", 8)]
    t, d = pair(devices, target=Request("target", gpu_layers=3))
    assert t.n_gpu_layers == 3 and t.layers["CUDA0"] == 3 and not t.auto
    assert d.n_gpu_layers == d.n_layers  # the auto draft plans around the fixed target
    with pytest.raises(PlacementError, match=r"CUDA0: needs .*lower -ngl/--gpu-layers \(now all\).*-nkvo.*-ngld"):
        pair(devices, target=Request("target", gpu_layers="all"))
    with pytest.raises(PlacementError, match="-ngld/--gpu-layers-draft"):
        pair([HOST64, card("CUDA0", 1.5)], draft=Request("draft", gpu_layers="all"))
    # -ngl 999 (llama.cpp's idiom for "all") is clamped to the model's layers
    (t,) = plan([HOST64, card("CUDA0", 24)], [(TARGET, Need(), Request("target", gpu_layers=999))])
    assert t.n_gpu_layers == 65


def test_no_offload_device_means_cpu_and_gpu_layers_are_refused():
    t, d = pair([HOST64])
    assert t.n_gpu_layers == d.n_gpu_layers == 0 and t.layers == {"CPU": 65}
    with pytest.raises(PlacementError, match="no device to offload"):
        pair([HOST64], target=Request("target", gpu_layers=5))
    with pytest.raises(PlacementError, match=r"-dev/--device CUDA7 is not a device.*CPU \(cpu\)"):
        pair([HOST64, card("CUDA0", 8)], target=Request("target", devices=("CUDA7",)))
    t, _ = pair([HOST64, card("CUDA0", 24)], target=Request("target", devices=("none",)))
    assert t.n_gpu_layers == 0
    with pytest.raises(PlacementError, match="-dev/--device CPU is not an offload device"):
        pair([HOST64, card("CUDA0", 8)], target=Request("target", devices=("CPU",)))


def test_kv_offload_off_moves_the_cache_to_the_host():
    gpu = card("CUDA0", 24)
    on = usage(TARGET, Need(), assign_layers(64, 65, [1.0]), ["CUDA0"], "CPU")
    off = usage(TARGET, Need(kv_offload=False), assign_layers(64, 65, [1.0]), ["CUDA0"], "CPU")
    kv = 64 * 4096 * TARGET.kv_bytes_per_token
    assert on["CUDA0"] - off["CUDA0"] == kv == off["CPU"] - on["CPU"]
    t, _ = pair([HOST64, gpu], need=Need(n_ctx=32768, kv_offload=False))
    assert t.n_gpu_layers == t.n_layers  # 8 GiB of KV on the host leaves the card to the weights


def test_assign_layers_matches_llama_cpp_rule():
    # the last ngl of n_layer + 1 layers, upper_bound over the cumulative split
    assert assign_layers(4, 3, [1.0, 1.0]) == [None, None, 0, 0, 1]
    assert assign_layers(4, 0, [1.0]) == [None] * 5
    assert assign_layers(4, 9, [2.0, 0.0, 3.0]) == [0, 0, 2, 2, 2]
    for counts in ([7, 5, 1], [1, 1], [10, 0, 3]):
        got = assign_layers(30, sum(counts), [float(c) for c in counts])
        assert [sum(1 for a in got if a == i) for i in range(len(counts))] == counts


def test_layout_from_a_real_header(smollm2_path):
    from localspec.models.gguf import read_header

    info = read_header(smollm2_path)
    lay = Layout.from_header(info)
    assert lay.n_layer == 30 and lay.n_vocab == 49152 and lay.n_ctx_train == 8192
    assert lay.kv_bytes_per_token == 3 * (64 + 64) * 2  # 3 KV heads of 64, K and V, F16
    embd = next(t.nbytes for t in info.tensors if t.name == "token_embd.weight")
    # tied embeddings: the output layer holds a copy of token_embd
    assert lay.weights == sum(t.nbytes for t in info.tensors) + embd
    assert lay.input_bytes >= embd and lay.output_bytes >= embd


def test_the_draft_stays_local_unless_devd_names_a_remote_device():
    """RPC servers come first in llama.cpp's device list; the target goes there, the draft
    (one network round trip per drafted token otherwise) stays on this machine."""
    rpc = [Device(n, "gpu", 20 * GiB, 20 * GiB, "RPC") for n in ("RPC0", "RPC1")]
    t, d = pair([HOST64, *rpc])
    assert set(t.devices) <= {"RPC0", "RPC1"} and t.n_gpu_layers == t.n_layers
    assert d.devices == () and d.layers == {"CPU": d.n_layers}
    _, d2 = pair([HOST64, *rpc], draft=Request("draft", devices=("RPC1",)))
    assert d2.devices == ("RPC1",)


def test_a_header_is_read_once_per_file_version(tmp_path):
    """read_header is cached per (file, size, mtime): a load asks for it several times. A
    rewritten file is read again; a missing one still fails in one line."""
    import os

    import pytest

    from localspec.errors import ModelNotFoundError
    from localspec.models.gguf import read_header
    from tests.conftest import write_gguf

    p = write_gguf(tmp_path / "m.gguf", n_floats=64)
    first = read_header(p)
    assert read_header(str(p)) is first  # the same parse, not a second one
    write_gguf(p, n_floats=128)
    os.utime(p, ns=(1, 1))  # a different mtime even on a coarse clock
    again = read_header(p)
    assert again is not first and again.file_size != first.file_size
    with pytest.raises(ModelNotFoundError):
        read_header(tmp_path / "absent.gguf")
