"""sd-scripts' and kohya_ss's formats (torch-free): the adapter the core reaches through registry.SD_SCRIPTS_ADAPTER.

What the core's config loading calls, by these names: sd-scripts keys in any flat config (compat.py: translated or
listed as ignored; keys.py: refused with the reason), a kohya_ss GUI JSON (gui_json.py, gui_json_flow.py) and a flat
`--config_file` TOML that no other adapter claims (reading.py). Beside them: the page's import of such files
(page_import.py) and a config written back as the sd-scripts command (export.py).
"""
from trainers.adapters.kohya.compat import IGNORED, TRANSLATED, lift_network_args
from trainers.adapters.kohya.gui_json import read_json_file
from trainers.adapters.kohya.keys import blank, ignored_keys_warning, refusals
from trainers.adapters.kohya.reading import read_sd_scripts as read

__all__ = ["IGNORED", "TRANSLATED", "blank", "ignored_keys_warning", "lift_network_args", "read", "read_json_file",
           "refusals"]
