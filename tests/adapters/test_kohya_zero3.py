"""An sd-scripts DeepSpeed ZeRO-3 TOML: zero_stage = 3 carries over; ZeRO-3's own keys are refused with the truth
about where ZeRO-3 runs (NVIDIA GPUs; CPU processes refuse it), not that it is missing."""
from __future__ import annotations

from pathlib import Path

import pytest

from trainers.core.options import ConfigError
from trainers.adapters.kohya.page_import import import_kohya_file

ZERO3 = 'pretrained_model_name_or_path = "/m/sd15.safetensors"\ntrain_data_dir = "/d"\noutput_dir = "/o"\n' \
        "deepspeed = true\nzero_stage = 3\n"


def test_zero_stage_3_imports_and_its_own_keys_say_where_zero3_runs(tmp_path: Path) -> None:
    plain = tmp_path / "plain.toml"
    plain.write_text(ZERO3, encoding="utf-8")
    _, values, _ = import_kohya_file(plain)
    assert (values["distributed_backend"], values["zero_stage"]) == ("deepspeed", 3)

    extra = tmp_path / "extra.toml"
    extra.write_text(ZERO3 + 'zero3_init_flag = true\nzero3_save_16bit_model = true\noffload_param_device = "cpu"\n',
                     encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        import_kohya_file(extra)
    said = {issue.field: issue.message for issue in err.value.issues}
    assert set(said) == {"zero3_init_flag", "zero3_save_16bit_model", "offload_param_device"}
    assert all("ZeRO-3 runs on NVIDIA GPUs; CPU processes refuse it" in m for m in said.values())
    assert not any("not available: zero_stage 1 or 2" in m for m in said.values())
    assert "offload_optimizer" in said["offload_param_device"]
