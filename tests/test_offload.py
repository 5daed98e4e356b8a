"""GPU-offload flags end to end on whatever llama.cpp build is installed (CI: Vulkan + RPC, no device visible).

What reaches llama.cpp is checked in the structs themselves (llama_model_params /
llama_context_params, built without loading), then through the real CLI: `localspec
devices`, `-ngl 0` / `-ngl auto` (silently CPU without a GPU), and the one-line errors for
GPU layers on a build without a GPU backend and for an unknown device.
"""

from __future__ import annotations

import ctypes
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from localspec.backend import devices as devs
from localspec.backend.context import Context, context_params
from localspec.backend.model import Model
from localspec.backend.offload import model_params, plan_pair
from localspec.cli.main import build_parser, main
from localspec.flags.args import session_options
from localspec.placement.load import LoadOptions
from localspec.placement.plan import Placement
from localspec.session import SessionOptions

ROOT = Path(__file__).resolve().parent.parent


def test_flags_reach_load_options_for_target_and_draft():
    a = build_parser().parse_args([
        "run", "-m", "t.gguf", "-md", "d.gguf", "-p", "x", "-ngl", "12", "-ngld", "all",
        "-dev", "CUDA0,CUDA1", "-devd", "CUDA1", "-sm", "row", "-ts", "3/1", "-mg", "1", "-nkvo",
        "-fa", "on", "-t", "4", "-td", "2", "--no-op-offload",
    ])
    o = session_options(a)
    t, d = o.target_load, o.draft_load
    assert (t.gpu_layers, t.devices, t.threads) == (12, ["CUDA0", "CUDA1"], 4)
    assert (d.gpu_layers, d.devices, d.threads) == ("all", ["CUDA1"], 2)
    for x in (t, d):
        assert (x.split_mode, x.tensor_split, x.main_gpu, x.kv_offload, x.flash_attn, x.op_offload) == (
            "row", [3.0, 1.0], 1, False, "on", False)
    # defaults: auto everywhere, the draft inherits -dev and -t
    o = session_options(build_parser().parse_args(["chat", "-dev", "Vulkan0", "-t", "3", "-ngl", "-1"]))
    assert o.target_load.gpu_layers == "all" and o.draft_load.gpu_layers == "auto"
    assert o.draft_load.devices == ["Vulkan0"] and o.draft_load.threads == 3
    assert o.target_load.flash_attn == "auto" and o.target_load.kv_offload
    assert o.target_load.op_offload and o.draft_load.op_offload  # llama.cpp's default


def test_model_params_carry_layers_devices_split_and_mode():
    cpu = devs.device_handle("CPU")
    assert cpu, "ggml has a CPU device in every build"
    pl = Placement(role="target", model="m", n_gpu_layers=7, n_layers=31, devices=("CPU",),
                   tensor_split=(3.0, 1.0))
    p, keep = model_params(LoadOptions(split_mode="row", main_gpu=1), pl)
    assert (p.n_gpu_layers, p.split_mode, p.main_gpu) == (7, 2, 1)
    arr = ctypes.cast(p.devices, ctypes.POINTER(ctypes.c_void_p))
    assert arr[0] == cpu and arr[1] is None  # NULL-terminated ggml_backend_dev_t list
    assert [p.tensor_split[i] for i in range(3)] == [3.0, 1.0, 0.0] and keep
    # -dev none: an empty list (no device at all); a CPU plan without -dev: llama.cpp's default
    p, _ = model_params(LoadOptions(devices=["none"]), Placement("target", "m", 0, 31))
    assert p.n_gpu_layers == 0 and ctypes.cast(p.devices, ctypes.POINTER(ctypes.c_void_p))[0] is None
    p, _ = model_params(LoadOptions(), Placement("target", "m", 0, 31))
    assert p.n_gpu_layers == 0 and p.devices is None and p.split_mode == 1


def test_repack_flags_reach_model_params_and_auto_leaves_amx_kernels_unused(monkeypatch):
    """--repack / -nr --no-repack (llama.cpp's names) set use_extra_bufts for target and draft;
    auto (no flag) repacks unless the build has AMX kernels, which crash on some machines."""
    pl = Placement("target", "m", 0, 31)
    for argv, want in ((["--no-repack"], False), (["-nr"], False), (["--repack"], True), ([], None)):
        o = session_options(build_parser().parse_args(["run", "-m", "t.gguf", "-md", "d.gguf", "-p", "x", *argv]))
        assert (o.target_load.repack, o.draft_load.repack) == (want, want), argv
    with pytest.raises(SystemExit):  # both at once is a usage error
        build_parser().parse_args(["run", "-m", "t.gguf", "-p", "x", "--repack", "--no-repack"])
    for amx in (False, True):
        monkeypatch.setattr(devs, "amx_kernels", lambda amx=amx: amx)
        assert model_params(LoadOptions(), pl)[0].use_extra_bufts is (not amx)
        assert model_params(LoadOptions(repack=True), pl)[0].use_extra_bufts is True
        assert model_params(LoadOptions(repack=False), pl)[0].use_extra_bufts is False


@pytest.mark.parametrize("amx", [False, True])
def test_build_scripts_flags_leave_amx_out_and_their_check_sees_an_amx_build(tmp_path, amx):
    """scripts/llama_cpp_no_amx.sh, sourced by every llama.cpp build (.ci/run included): its
    CMAKE_ARGS split (as scikit-build-core splits them) into C and C++ flags with the three
    -mno-amx-*, and has_amx_kernels tells an AMX build (which they rebuild) from one without,
    here through a stand-in llama_cpp module."""
    fake = tmp_path / "llama_cpp.py"
    fake.write_text(f"def llama_print_system_info():\n    return b'CPU : AVX512 = 1 | {'AMX_INT8 = 1 | ' if amx else ''}'\n")
    script = ('set -euo pipefail; source scripts/llama_cpp_no_amx.sh; no_amx_cmake_args; echo; '
              f'if has_amx_kernels {sys.executable}; then echo AMX; else echo none; fi')
    r = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    args, verdict = r.stdout.splitlines()
    assert verdict == ("AMX" if amx else "none")
    if os.uname().machine == "x86_64":
        flags = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
        assert shlex.split(args) == [f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"]
    else:
        assert args == ""


def test_installed_build_decodes_quantized_weights_with_the_auto_repack(smollm2_path):
    """The crash this guards against: an AMX build's first quantized decode segfaulted (SmolLM2
    Q4_1 here). Whatever the build, auto must give a context that decodes a batch (in a child
    process, so a segfault fails this test instead of ending the run)."""
    code = (
        "from localspec.backend.model import Model; from localspec.backend.context import Context\n"
        f"m = Model({str(smollm2_path)!r}); c = Context(m, n_ctx=256, threads=1)\n"
        "c.batch.clear(); c.batch.add_sequence(list(range(10, 30)), 0, 0); c.decode()\n"
        "print(c.logits_all().shape[1])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-800:]
    assert int(r.stdout.split()[-1]) > 1000


@pytest.mark.parametrize("arch", ["qwen35", "mamba2", "gemma3"])
def test_no_repack_loads_and_decodes_every_memory_kind_alike(tiny, arch):
    """--no-repack is a load parameter of every model, not only attention ones: a hybrid, a
    recurrent and a sliding-window model load with it, key their curves apart, and decode the
    same logits as with repacking on (their F16/F32 weights have no repacked layout)."""
    rows = {}
    for repack in (True, False):
        m = Model(tiny[arch], load=LoadOptions(gpu_layers=0, threads=1, repack=repack))
        c = None
        try:
            c = Context(m, n_ctx=256, n_batch=64, n_seq_max=2, threads=1)
            assert c.placement_key.endswith("|t=1") and ("|norp" in c.placement_key) is (not repack)
            c.batch.clear()
            c.batch.add_sequence(list(range(10, 26)), 0, 0)
            c.decode()
            rows[repack] = c.logits_all()[-1].copy()
        finally:
            if c is not None:
                c.close()
            m.close()
    assert np.array_equal(rows[True], rows[False])


@pytest.mark.parametrize(("fa", "kvo", "want"), [("auto", True, -1), ("on", False, 1), ("off", True, 0)])
def test_context_params_carry_flash_attn_and_kv_offload(fa, kvo, want):
    p = context_params(LoadOptions(flash_attn=fa, kv_offload=kvo), n_ctx=1024, n_batch=64,
                       n_ubatch=None, n_seq_max=4, threads=3)
    assert (p.flash_attn_type, p.offload_kqv, p.n_threads, p.n_threads_batch) == (want, kvo, 3, 3)
    assert (p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max, p.kv_unified) == (1024, 64, 64, 4, True)
    assert p.op_offload  # llama.cpp's default
    off = context_params(LoadOptions(op_offload=False), n_ctx=1024, n_batch=64, n_ubatch=None, n_seq_max=4,
                         threads=3)
    assert not off.op_offload


def test_loaded_model_and_context_follow_their_load_options(smollm2_path):
    # op offload off and repacking off get cost curves of their own (a CPU prompt decode no
    # longer goes to a GPU; unrepacked Q4 rows decode at another speed); auto repacks unless
    # the build has AMX kernels
    auto = "" if devs.repack_on(None) else "|norp"
    for op_offload, repack, key in ((True, None, f"CPU:31|fa=off|kvo=1{auto}|t=2"),
                                    (False, True, "CPU:31|fa=off|kvo=1|nopo|t=2"),
                                    (True, False, "CPU:31|fa=off|kvo=1|norp|t=2")):
        m = Model(smollm2_path, load=LoadOptions(gpu_layers=0, flash_attn="off", threads=2, op_offload=op_offload,
                                                 repack=repack))
        try:
            c = Context(m, n_ctx=256, threads=1)  # the model's own -t/-td wins over the session's
            assert c.threads == 2
            assert c.placement_key == key
            c.close()
        finally:
            m.close()


def test_target_and_draft_get_their_own_threads(smollm2_path, smollm2_q8_path):
    from localspec.loading import load_session

    opts = SessionOptions(n_ctx=256, threads=1, target_load=LoadOptions(threads=1),
                          draft_load=LoadOptions(threads=2))
    sess = load_session(str(smollm2_path), str(smollm2_q8_path), opts, None)
    try:
        assert sess.target.ctx.threads == 1 and sess.draft.ctx.threads == 2
        assert sess.target.ctx.placement_key != sess.draft.ctx.placement_key
        assert sess.target_model.placement.summary() == "CPU 31/31 layers"
    finally:
        sess.close()


def test_plan_pair_on_this_build(smollm2_path, smollm2_q8_path):
    pp = plan_pair(SessionOptions(), smollm2_path, smollm2_q8_path)
    gpus = [d for d in devs.devices() if d.kind in ("gpu", "igpu")]
    if not gpus:
        assert pp.target.n_gpu_layers == pp.draft.n_gpu_layers == 0
        assert pp.target.layers == {"CPU": 31}
    else:  # 135M models fit on any GPU
        assert pp.draft.n_gpu_layers == pp.target.n_gpu_layers == 31


def test_plan_models_with_a_gpu_present_offloads_from_the_real_headers(smollm2_path, smollm2_q8_path):
    """The glue (headers -> layouts -> planner) with a synthetic 8 GiB GPU next to this host."""
    from localspec.backend.offload import plan_models
    from localspec.placement.plan import Device, GiB, PlacementError

    present = [Device("CPU", "cpu", 16 * GiB, 16 * GiB, "CPU"), Device("CUDA0", "gpu", 8 * GiB, 8 * GiB, "CUDA")]
    models = [("target", smollm2_path, LoadOptions()), ("draft", smollm2_q8_path, LoadOptions(gpu_layers=5))]
    t, d = plan_models(SessionOptions(n_ctx=2048), models, present)
    assert t.summary() == "CUDA0 31/31 layers" and t.devices == ("CUDA0",)
    assert d.summary() == "CUDA0 5 + CPU 26 of 31 layers" and not d.auto
    assert 0 < t.memory["CUDA0"] < 1 * GiB
    with pytest.raises(PlacementError, match="-devd/--device-draft CUDA1 is not a device"):
        plan_models(SessionOptions(), [("draft", smollm2_path, LoadOptions(devices=["CUDA1"]))], present)


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _host_only(monkeypatch, built: list[str]) -> None:
    """Make this process look like a build with `built` GPU backends and no GPU found,
    whatever llama.cpp is installed (CI's has Vulkan compiled in, with no device visible
    unless GGML_VK_VISIBLE_DEVICES names lavapipe), so both messages are tested everywhere."""
    host = [d for d in devs.devices() if d.kind not in ("gpu", "igpu")]
    monkeypatch.setattr(devs, "gpu_backends", lambda: list(built))
    monkeypatch.setattr(devs, "devices", lambda: list(host))


@pytest.mark.parametrize("built", [[], ["Vulkan"]])
def test_devices_lists_the_cpu_and_how_to_get_a_gpu(capsys, monkeypatch, smollm2_path, built):
    _host_only(monkeypatch, built)
    rc, out, err = _cli(capsys, "devices", "-m", str(smollm2_path), "-md", str(smollm2_path))
    assert rc == 0 and not err
    lines = out.splitlines()
    assert any(ln.split()[:2] == ["CPU", "cpu"] and "GiB" in ln for ln in lines)
    assert "backends in this build:" in out and "CPU" in lines[0]
    if not built:
        assert "no GPU backend is compiled into this llama.cpp build" in out
        assert "pip install --force-reinstall --no-cache-dir llama-cpp-python==0.3.36" in out
    else:
        assert "the Vulkan backend found no device: models run on the CPU" in out
        assert "GGML_VK_VISIBLE_DEVICES" in out and "pip install" not in out
    assert "target SmolLM2" in out and "draft SmolLM2" in out and "31/31 layers" in out


@pytest.mark.parametrize("amx", [False, True])
def test_devices_says_when_amx_kernels_keep_repacking_off(capsys, monkeypatch, amx):
    monkeypatch.setattr(devs, "amx_kernels", lambda: amx)
    rc, out, _ = _cli(capsys, "devices")
    assert rc == 0
    assert ("weight repacking is off unless --repack" in out) is amx


@pytest.mark.parametrize("built", [[], ["Vulkan"]])
def test_gpu_layers_without_a_gpu_exit_2_with_the_way_out(capsys, monkeypatch, smollm2_path, built):
    """A CPU-only build names the reinstall command; a GPU build that found no GPU names
    the device list and what to check, not a reinstall."""
    _host_only(monkeypatch, built)
    for flag in ("-ngl", "-ngld"):
        rc, out, err = _cli(capsys, "run", "-m", str(smollm2_path), "-md", str(smollm2_path),
                            "-p", "hi", "-n", "2", flag, "all")
        assert rc == 2 and not out
        assert err.count("\n") == 1 and err.startswith(f"error: {flag}/")
        if not built:
            assert "no GPU backend" in err and devs.reinstall_hint() in err
        else:
            assert "the Vulkan backend found no GPU (devices: CPU (cpu)" in err and "-ngl 0" in err


def test_unknown_device_exits_2_with_the_list(capsys, smollm2_path):
    rc, out, err = _cli(capsys, "run", "-m", str(smollm2_path), "-p", "hi", "-dev", "NOPE0")
    assert rc == 2 and err.count("\n") == 1
    assert "-dev/--device NOPE0 is not a device" in err
    for d in devs.devices():
        assert d.name in err


@pytest.mark.parametrize("ngl", ["0", "auto"])
def test_ngl_0_and_auto_run_silently_on_the_cpu(capsys, monkeypatch, smollm2_path, ngl):
    _host_only(monkeypatch, devs.gpu_backends())  # the installed build, with no GPU found
    rc, out, err = _cli(capsys, "run", "-m", str(smollm2_path), "-p", "Say hi", "-n", "4",
                        "--method", "ar", "-t", "1", "-ngl", ngl, "--json")
    assert rc == 0 and out.strip()
    assert "error" not in err.lower() and "warning" not in err.lower()


@pytest.mark.slow  # builds the offline bundle and runs its smoke check (~20 s)
def test_gpu_check_prepare_bundle_is_under_60_mib_and_its_check_runs(tmp_path):
    """Cached in $LOCALSPEC_HOME/gpu-check (~/.cache/localspec): the first run downloads the
    75 MB sdist and the wheels from PyPI (a minute or two), later runs only re-pack (~1 s).
    Then the bundle's check runs in its smoke mode (no GPU, no CUDA build, tiny models)."""
    bundle = tmp_path / "bundle"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--prepare", str(bundle)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file())
    assert 1 << 20 < size < 60 << 20
    names = {f.name for f in bundle.iterdir()}
    assert {"gpu_check.sh", "localspec-src.tar.gz", "llama-cpp-python-0.3.36-trimmed.tar.xz", "MANIFEST"} <= names
    wheels = {f.name.split("-")[0].lower() for f in (bundle / "wheels").iterdir()}
    assert {"scikit_build_core", "jinja2", "gguf", "numpy"} <= wheels
    listing = subprocess.run(["tar", "-tJf", str(bundle / "llama-cpp-python-0.3.36-trimmed.tar.xz")],
                             capture_output=True, text=True, check=True).stdout
    assert "vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt" in listing
    assert "vendor/llama.cpp/models/" not in listing and "/ggml-vulkan/" not in listing
    # the check itself, without a GPU: no build (the installed llama_cpp), tiny random models
    env = {**os.environ, "GPU_CHECK_SMOKE": "1", "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(bundle / "gpu_check.sh"), str(bundle)], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((bundle / "report" / "report.json").read_text())
    assert "smoke" in report and 0.5 < report["alpha"]["value"] < 1.0
    assert all(v["equal"] for k, v in report["greedy_vs_ar"].items() if k != "n_tokens")
    assert report["curves_cpu"]["t1.5b"]["sizes"] == [1, 2, 4, 8, 16, 32, 64]
    assert "SMOKE TEST" in proc.stdout and "predicted, default pair shapes on the GPU" in proc.stdout


def test_random_gguf_writer_makes_a_model_llama_cpp_runs(tmp_path):
    out = tmp_path / "tiny.gguf"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check_gguf.py"), str(out), "--shape", "tiny"],
                   check=True, timeout=120)
    m = Model(out)
    try:
        assert m.n_vocab == 512 and m.placement.n_layers == 3
        c = Context(m, n_ctx=128, n_batch=16, n_seq_max=1, threads=1)
        c.batch.clear().add_sequence([1, 300, 301], 0, 0, logits_last=True)
        c.decode()
        row = c.logits(0)
        assert row.shape == (512,) and float(row.std()) > 0.5
        c.close()
    finally:
        m.close()
