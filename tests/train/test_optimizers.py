"""Optimizers and LR schedules as sd-scripts builds them: every optimizer steps on CPU, the torch-free table matches the
real classes, each schedule's pure-Python curve matches the library scheduler stepped in torch, bad arguments stop
a run before any model loads, schedule-free optimizers switch to eval mode around samples and saves."""
from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path

import pytest
import torch

from trainers.core.errors import ConfigError
from trainers.core.optimizers import BUILT_IN, OPTIMIZER_NAMES, TORCH_OPTIMIZERS, parse_args
from trainers.core.options import TrainConfig, load_config
from trainers.core.options.optimizer_checks import optimizer_issues, optimizer_warnings
from trainers.core.schedules import LIBRARY, SCHEDULER_ARGS, SCHEDULERS, lr_curve, preview_blocker
from trainers.train.optim import OptimizerModes, build_lr_scheduler, build_optimizer, check_optimizer

from helpers import events, fake_family_env, run_trainer, sets, train


def _class(target: str) -> type:
    module, _, name = target.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _step(cfg: TrainConfig, steps: int = 2) -> tuple[torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 64)  # 4096 weights: bitsandbytes keeps 8-bit states from that size up
    before = layer.weight.detach().clone()
    opt = build_optimizer(cfg, [{"params": list(layer.parameters()), "lr": cfg.learning_rate}], warn=lambda m: None)
    for _ in range(steps):
        layer(torch.randn(8, 64)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return opt, before, layer.weight.detach()


# --- the table and the classes ---

def test_the_keyword_table_matches_the_real_classes() -> None:
    for spec in BUILT_IN.values():
        params = list(inspect.signature(_class(spec.target)).parameters)
        assert params[:2] == ["params", "lr"], spec.name
        assert set(spec.args) | set(spec.fixed) == set(params[2:]), spec.name
        assert set(spec.defaults) <= set(spec.args), spec.name
    real = sorted(n for n, c in vars(torch.optim).items()
                  if isinstance(c, type) and issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer)
    assert sorted(TORCH_OPTIMIZERS) == real


def test_the_schedule_argument_table_matches_the_library_functions() -> None:
    assert set(SCHEDULERS) == set(LIBRARY) | {"adafactor"}
    for name, (target, passed) in LIBRARY.items():
        params = set(inspect.signature(_class(target)).parameters) - {"optimizer", "last_epoch"}
        assert set(SCHEDULER_ARGS[name]) == params - passed, name


def test_optimizer_args_are_read_as_sd_scripts_reads_them() -> None:
    kwargs, bad = parse_args(["betas=0.9,0.99", "weight_decay=1e-2", "decouple=True", "warmup_type=cosine", "x=[1, 2]",
                              "no_value", "2=3"])
    assert kwargs == {"betas": (0.9, 0.99), "weight_decay": 0.01, "decouple": True, "warmup_type": "cosine",
                      "x": [1, 2]}
    assert bad == ["no_value", "2=3"]


def test_optimizer_type_takes_sd_scripts_names_in_any_case_and_class_paths() -> None:
    assert load_config("lora", overrides=["optimizer_type='pagedadamw8bit'"]).optimizer_type == "PagedAdamW8bit"
    path = load_config("lora", overrides=["optimizer_type='torch.optim.RMSprop'"]).optimizer_type
    assert path == "torch.optim.RMSprop"
    with pytest.raises(ConfigError) as err:
        load_config("lora", overrides=["optimizer_type='not a class'"])
    assert "module.Class path" in str(err.value)
    issues = optimizer_issues(TrainConfig("lora", {"optimizer_type": "AdamW8bt"}))
    assert issues[0].field == "optimizer_type" and "did you mean 'AdamW8bit'" in issues[0].message


# --- every optimizer on CPU ---

@pytest.mark.parametrize("name", [*OPTIMIZER_NAMES, "torch.optim.RMSprop", "RMSprop"])
def test_every_optimizer_takes_a_step_on_cpu(name: str) -> None:
    lr = 1.0 if name.startswith(("DAdapt", "Prodigy")) else 1e-2
    steps = 6 if name == "RAdamScheduleFree" else 2  # RAdam's first steps do not move the weights (rho_t <= 4)
    opt, before, after = _step(TrainConfig("lora", {"optimizer_type": name, "learning_rate": lr}), steps)
    assert not torch.equal(before, after), f"{name} did not move the weights"
    assert torch.isfinite(after).all()
    if name.endswith("8bit"):
        assert any(t.dtype == torch.uint8 for s in opt.state.values() for t in s.values() if torch.is_tensor(t))


def test_sd_scripts_defaults() -> None:
    sgd, _, _ = _step(TrainConfig("lora", {"optimizer_type": "SGDNesterov"}), steps=1)
    assert type(sgd) is torch.optim.SGD and sgd.param_groups[0]["nesterov"] and sgd.param_groups[0]["momentum"] == 0.9
    preprint, _, _ = _step(TrainConfig("lora", {"optimizer_type": "dadaptation", "learning_rate": 1.0}), steps=1)
    assert type(preprint).__name__ == "DAdaptAdamPreprint"


def test_adamw_runs_fused_on_the_cpu_and_updates_as_the_per_tensor_loop() -> None:
    fused, before, after = _step(TrainConfig("lora", {"optimizer_type": "AdamW", "learning_rate": 1e-2}), steps=3)
    assert fused.param_groups[0]["fused"] is True
    looped, _, reference = _step(TrainConfig("lora", {"optimizer_type": "AdamW", "learning_rate": 1e-2,
                                                      "optimizer_args": ["foreach=False"]}), steps=3)
    assert not looped.param_groups[0].get("fused") and (after - before).abs().max() > 1e-3
    assert torch.allclose(after, reference, atol=1e-6)


def test_adafactor_defaults_are_sd_scripts() -> None:
    from transformers.optimization import Adafactor, AdafactorSchedule

    cfg = TrainConfig("lora", {"optimizer_type": "Adafactor", "learning_rate": 1e-3, "lr_scheduler": "cosine"})
    opt, before, after = _step(cfg, steps=1)
    group = opt.param_groups[0]
    assert isinstance(opt, Adafactor) and not torch.equal(before, after)
    assert (group["relative_step"], group["scale_parameter"], group["warmup_init"], opt.defaults["lr"]) == (
        True, True, False, None)
    assert isinstance(build_lr_scheduler(cfg, opt, 10), AdafactorSchedule)  # lr_scheduler gives way, as in sd-scripts
    assert any("replaced by 'adafactor'" in w for w in optimizer_warnings(cfg))
    assert preview_blocker(cfg) and optimizer_issues(cfg.replace(lr_warmup_steps=5))[0].field == "lr_warmup_steps"
    forced, _, _ = _step(cfg.replace(optimizer_args=["relative_step=False", "warmup_init=True"]), steps=1)
    assert forced.param_groups[0]["relative_step"] and forced.param_groups[0]["warmup_init"]
    fixed_cfg = cfg.replace(optimizer_args=["relative_step=False", "scale_parameter=False"])
    fixed, _, _ = _step(fixed_cfg, steps=1)
    assert fixed.defaults["lr"] == 1e-3 and not fixed.param_groups[0]["relative_step"]
    assert not isinstance(build_lr_scheduler(fixed_cfg, fixed, 10), AdafactorSchedule)


def test_adaptive_optimizers_warn_about_a_low_rate_and_refuse_several() -> None:
    cfg = TrainConfig("lora", {"optimizer_type": "Prodigy", "learning_rate": 1e-4})
    warned: list[str] = []
    layer = torch.nn.Linear(4, 4)
    build_optimizer(cfg, [{"params": [layer.weight], "lr": 1e-4}], warn=warned.append)
    assert any("around 1.0" in w for w in warned)
    with pytest.raises(ConfigError) as err:
        build_optimizer(cfg, [{"params": [layer.weight], "lr": 1.0}, {"params": [layer.bias], "lr": 0.5}],
                        warn=warned.append)
    assert err.value.issues[0].field == "unet_lr"


# --- bad arguments ---

def test_bad_optimizer_args_name_the_option_the_key_and_what_is_allowed() -> None:
    cfg = TrainConfig("lora", {"optimizer_args": ["foo=1", "weight_decay=-1", "betas=0.9", "eps=0"]})
    messages = [str(i) for i in optimizer_issues(cfg)]
    assert all(m.startswith("optimizer_args: ") for m in messages) and len(messages) == 4
    assert "no argument 'foo'" in messages[0] and "it accepts: amsgrad, betas," in messages[0]
    assert "weight_decay must be a number >= 0" in messages[1]
    assert "betas must be 2 numbers from 0 to below 1, e.g. betas=0.9,0.999" in messages[2]
    assert "eps must be a number > 0" in messages[3]
    nesterov = optimizer_issues(TrainConfig("lora", {"optimizer_type": "SGDNesterov",
                                                     "optimizer_args": ["nesterov=False"]}))
    assert "always runs with nesterov=True" in nesterov[0].message


def _fake_model_and_data(tmp_path: Path, model: Path) -> dict[str, str]:
    from trainers.demo import build_dataset

    return {"pretrained_model_name_or_path": str(model), "train_data_dir": str(build_dataset(tmp_path / "data")),
            "output_dir": str(tmp_path / "out")}


def test_bad_optimizer_args_stop_the_run_before_any_model_loads(tmp_path: Path, fake_model_dir: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("trainers.train.session.load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    code = train("lora", tmp_path / "run", **_fake_model_and_data(tmp_path, fake_model_dir), max_train_steps=2,
                 optimizer_args=["foo=1", "weight_decay=-1", "betas=0.9"])
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert code == 2 and status["message"].count("optimizer_args:") == 3


@pytest.mark.slow
def test_the_trainer_exits_with_code_2_and_the_message(tmp_path: Path, fake_model_dir: Path) -> None:
    args = sets(**_fake_model_and_data(tmp_path, fake_model_dir), max_train_steps=2,
                optimizer_args=["foo=1", "betas=0.9"])
    result = run_trainer(args, tmp_path / "run", env=fake_family_env())
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "optimizer_args: foo=1: AdamW (torch.optim.AdamW) has no argument 'foo'" in result.stderr
    assert "betas must be 2 numbers" in result.stderr


def test_a_class_path_optimizer_works_and_a_bad_one_is_clear() -> None:
    cfg = TrainConfig("lora", {"optimizer_type": "torch.optim.RMSprop", "optimizer_args": ["alpha=0.9"]})
    check_optimizer(cfg)
    opt, before, after = _step(cfg)
    assert type(opt) is torch.optim.RMSprop and opt.defaults["alpha"] == 0.9 and not torch.equal(before, after)
    for bad, field, text in [("torch.optim.NoSuchOptimizer", "optimizer_type", "has no class 'NoSuchOptimizer'"),
                             ("no_such_package.Opt", "optimizer_type", "cannot import module 'no_such_package'")]:
        with pytest.raises(ConfigError) as err:
            check_optimizer(cfg.replace(optimizer_type=bad))
        assert err.value.issues[0].field == field and text in err.value.issues[0].message
        with pytest.raises(ConfigError):
            _step(cfg.replace(optimizer_type=bad))
    refused = cfg.replace(optimizer_args=["foo=1"])
    with pytest.raises(ConfigError) as err:
        check_optimizer(refused)
    assert err.value.issues[0].field == "optimizer_args" and "foo" in err.value.issues[0].message
    with pytest.raises(ConfigError) as err:
        _step(refused)
    assert "torch.optim.RMSprop refused its arguments" in err.value.issues[0].message


# --- schedules ---

def _library_lrs(name: str, lr: float, total: int, **kwargs: object) -> list[float]:
    target, _ = LIBRARY[name]
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = _class(target)(opt, **kwargs)
    out = []
    for _ in range(total):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out


SCHEDULE_CASES = [  # (our options, the library function's arguments as sd-scripts' get_scheduler_fix passes them)
    ({"lr_scheduler": "constant"}, {}),
    ({"lr_scheduler": "constant_with_warmup", "lr_warmup_steps": 10}, {"num_warmup_steps": 10}),
    ({"lr_scheduler": "linear", "lr_warmup_steps": 0.1}, {"num_warmup_steps": 10, "num_training_steps": 100}),
    ({"lr_scheduler": "cosine", "lr_warmup_steps": 5}, {"num_warmup_steps": 5, "num_training_steps": 100}),
    ({"lr_scheduler": "cosine", "lr_scheduler_args": ["num_cycles=1.5"]},
     {"num_warmup_steps": 0, "num_training_steps": 100, "num_cycles": 1.5}),
    ({"lr_scheduler": "cosine_with_restarts", "lr_warmup_steps": 7, "lr_scheduler_num_cycles": 3},
     {"num_warmup_steps": 7, "num_training_steps": 100, "num_cycles": 3}),
    ({"lr_scheduler": "polynomial", "lr_warmup_steps": 4, "lr_scheduler_power": 2.0,
      "lr_scheduler_args": ["lr_end=1e-4"]},
     {"num_warmup_steps": 4, "num_training_steps": 100, "power": 2.0, "lr_end": 1e-4}),
    ({"lr_scheduler": "cosine_with_min_lr", "lr_warmup_steps": 10, "lr_scheduler_min_lr_ratio": 0.1},
     {"num_warmup_steps": 10, "num_training_steps": 100, "num_cycles": 0.5, "min_lr_rate": 0.1}),
    ({"lr_scheduler": "cosine_with_min_lr", "lr_scheduler_num_cycles": 3, "lr_scheduler_args": ["min_lr=1e-3"]},
     {"num_warmup_steps": 0, "num_training_steps": 100, "num_cycles": 1.5, "min_lr": 1e-3}),
    ({"lr_scheduler": "warmup_stable_decay", "lr_warmup_steps": 10, "lr_decay_steps": 0.3,
      "lr_scheduler_min_lr_ratio": 0.05}, {"num_warmup_steps": 10, "num_stable_steps": 60, "num_decay_steps": 30,
                                           "num_cycles": 0.5, "min_lr_ratio": 0.05}),
    ({"lr_scheduler": "warmup_stable_decay", "lr_warmup_steps": 20, "lr_decay_steps": 50,
      "lr_scheduler_args": ["warmup_type=cosine", "decay_type=1-sqrt"]},
     {"num_warmup_steps": 20, "num_stable_steps": 30, "num_decay_steps": 50, "num_cycles": 0.5, "min_lr_ratio": 0.0,
      "warmup_type": "cosine", "decay_type": "1-sqrt"}),
    ({"lr_scheduler": "inverse_sqrt", "lr_warmup_steps": 10}, {"num_warmup_steps": 10, "timescale": None}),
    ({"lr_scheduler": "inverse_sqrt", "lr_scheduler_timescale": 25}, {"num_warmup_steps": 0, "timescale": 25}),
    ({"lr_scheduler": "piecewise_constant", "lr_scheduler_args": ["step_rules=1:10,0.1:20,0.01"]},
     {"step_rules": "1:10,0.1:20,0.01"}),
]


@pytest.mark.parametrize("options, library_args", SCHEDULE_CASES, ids=lambda v: v.get("lr_scheduler", ""))
def test_each_schedule_matches_the_library_scheduler(options: dict, library_args: dict) -> None:
    lr, total = 1e-2, 100
    cfg = TrainConfig("lora", {"learning_rate": lr, "max_train_steps": total, **options})
    assert optimizer_issues(cfg) == []
    expected = _library_lrs(options["lr_scheduler"], lr, total, **library_args)
    assert [value for _, value in lr_curve(cfg, total)] == pytest.approx(expected, rel=1e-12, abs=1e-15)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    ours = build_lr_scheduler(cfg, opt, total)
    seen = []
    for _ in range(total):
        seen.append(ours.get_last_lr()[0])
        opt.step()
        ours.step()
    assert seen == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_a_scheduler_class_is_built_with_its_arguments_and_not_previewed() -> None:
    cfg = TrainConfig("lora", {"lr_scheduler_type": "CosineAnnealingLR", "lr_scheduler_args": ["T_max=10"]})
    check_optimizer(cfg)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    assert type(build_lr_scheduler(cfg, opt, 10)).__name__ == "CosineAnnealingLR"
    assert "cannot be previewed" in preview_blocker(cfg)
    with pytest.raises(ConfigError) as err:
        check_optimizer(cfg.replace(lr_scheduler_args=["T_maxx=10"]))
    assert err.value.issues[0].field == "lr_scheduler_args"


def test_schedule_options_that_sd_scripts_refuses_are_errors() -> None:
    fields = lambda **v: [i.field for i in optimizer_issues(TrainConfig("lora", v))]  # noqa: E731
    assert fields(lr_scheduler="cosine_with_min_lr") == ["lr_scheduler_min_lr_ratio"]
    assert fields(lr_scheduler="adafactor") == ["lr_scheduler"]
    assert fields(lr_scheduler="cosine", lr_scheduler_args=["num_cyclez=2"]) == ["lr_scheduler_args"]
    assert fields(lr_scheduler="polynomial", learning_rate=1e-8) == ["learning_rate"]
    assert fields(lr_scheduler_type="StepLR", lr_warmup_steps=3) == ["lr_warmup_steps"]


# --- schedule-free ---

def test_schedule_free_modes_switch_around_evaluation() -> None:
    cfg = TrainConfig("lora", {"optimizer_type": "AdamWScheduleFree"})
    opt, _, _ = _step(cfg)
    modes = OptimizerModes(opt, cfg)
    assert opt.param_groups[0]["train_mode"]
    seen = []
    with modes.evaluating():
        seen.append(opt.param_groups[0]["train_mode"])
        with modes.evaluating():  # nested: still eval, and back to train only at the outer end
            pass
        seen.append(opt.param_groups[0]["train_mode"])
    sample = modes.around(lambda: seen.append(opt.param_groups[0]["train_mode"]))
    sample()
    assert seen == [False, False, False] and opt.param_groups[0]["train_mode"]
    plain = OptimizerModes(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))]), TrainConfig("lora"))
    assert not plain.active and plain.around(len) is len


@pytest.mark.slow
def test_schedule_free_samples_and_saves_in_eval_mode_and_resumes(fake_model_dir: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import trainers.sampling.pipeline as pipeline
    import trainers.train.loop as loop
    from trainers.demo import build_dataset
    from trainers.methods.lora.file_format import read_lora_file
    from trainers.train.saving import Saver

    built, modes = [], []
    build = loop.build_optimizer
    monkeypatch.setattr(loop, "build_optimizer", lambda *a, **k: built.append(build(*a, **k)) or built[-1])
    generate, announce = pipeline.generate_samples, Saver._announce
    train_mode = lambda: built[-1].param_groups[0]["train_mode"]  # noqa: E731
    monkeypatch.setattr(pipeline, "generate_samples", lambda *a, **k: modes.append(("sample", train_mode()))
                        or generate(*a, **k))
    monkeypatch.setattr(Saver, "_announce", lambda self, path, at, kind, state: modes.append((kind, train_mode()))
                        or announce(self, path, at, kind, state))
    data = build_dataset(tmp_path / "data", folder="1_sks shape")
    run = {"pretrained_model_name_or_path": str(fake_model_dir), "train_data_dir": str(data), "resolution": "64",
           "output_dir": str(tmp_path / "out"), "train_batch_size": 2, "max_data_loader_n_workers": 0,
           "network_dim": 4, "optimizer_type": "AdamWScheduleFree", "learning_rate": 1e-3, "max_train_steps": 4,
           "save_precision": "float"}
    code = train("lora", tmp_path / "straight", **run, output_name="straight", save_every_n_steps=2, save_state=True,
                 sample_every_n_steps=2, sample_prompt_lines=["sks shape --s 2"])
    assert code == 0, [e for e in events(tmp_path / "straight") if e["type"] == "error"]
    # saves and samples at step 2, a sample at 4, the final save; the steps ran too (they need train mode)
    assert modes == [("step", False), ("sample", False), ("sample", False), ("final", False)]
    state = tmp_path / "out" / "straight-step00000002-state"
    assert train("lora", tmp_path / "resumed", **run, output_name="resumed", resume=str(state)) == 0
    straight, resumed = (read_lora_file(tmp_path / "out" / f"{n}.safetensors")[0] for n in ("straight", "resumed"))
    assert max((straight[k] - resumed[k]).abs().max().item() for k in straight) <= 1e-6


# --- the GUI's Validate report ---

def test_the_validate_report_draws_the_learning_rate_of_the_planned_steps(tmp_path: Path, fake_model_dir: Path) -> None:
    from gui.checks import check_form

    values = {**_fake_model_and_data(tmp_path, fake_model_dir), "max_train_epochs": 2, "train_batch_size": 4,
              "learning_rate": 1e-3,
              "text_encoder_lr": 5e-4, "lr_scheduler": "cosine", "lr_warmup_steps": 0.25}
    report = check_form("lora", values)
    assert report.ok, report.summary()
    steps = int(report.steps.rsplit("**", 2)[-2].split()[0])  # "... = **N steps** in total."
    curve = report.lr_curve["learning_rate"]
    assert [s for s, _ in curve] == list(range(1, steps + 1)) and curve[0][1] == 0.0
    assert max(lr for _, lr in curve) == pytest.approx(1e-3) and curve[-1][1] < 1e-4
    assert max(lr for _, lr in report.lr_curve["text_encoder_lr"]) == pytest.approx(5e-4)
    assert "`cosine` over" in report.lr_note and "Learning rate" in report.summary()
    relative = check_form("lora", {**values, "optimizer_type": "Adafactor", "lr_warmup_steps": 0})
    assert relative.lr_curve == {} and "not drawn" in relative.lr_note
    assert any("finds its own learning rate" in w for w in relative.warnings)
