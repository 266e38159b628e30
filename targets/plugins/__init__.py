"""Vendor plugins: a vendor library takes the parts of a graph it matches (TVM's BYOC).

A plugin declares its name and the ODLA device it serves, the patterns it takes (each with a
check on shapes, dtypes and attributes), a codegen that turns the matched functions into a
runtime module, what linking and running that module needs, and the vendor-specific
computation items it understands. Plugins come from the ``odla_tvm.plugins`` entry point
group, so a package outside this repository adds a vendor by declaring::

    [project.entry-points."odla_tvm.plugins"]
    myvendor = "myvendor_odla:PLUGIN"      # a VendorPlugin, or a function returning one

Partitioning is TVM's (FuseOpsByPattern, MergeCompositeFunctions, RunCodegen: partitioning.py);
what the plugin does not take stays with TVM's own code generation in the same module. The
registry here loads nothing of TVM's compiler; partitioning.py and regions.py (what codegens
share) do, when first named.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from toolchain import compiling_attributes

if TYPE_CHECKING:  # annotations, and the lazy names below for editors (tests/test_rules.py)
    import tvm
    from tvm import relax
    from tvm.relax.dpl import DFPattern

    from .partitioning import offloaded_regions, partition
    from .regions import Step, composite_steps, static_library

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "odla_tvm.plugins"


class PluginUnavailable(RuntimeError):
    """A plugin cannot build or run here; the message says what to install."""


@dataclass(frozen=True)
class PluginPattern:
    """A subgraph a plugin takes: ``pattern`` (the root is what the composite computes),
    ``annotations`` naming the pattern's parts for ``check``, and ``check``, given TVM's
    PatternCheckContext, saying whether this match (its shapes, dtypes, attributes) is taken."""

    name: str  # "<plugin>.<what>": the composite function's name, which the codegen reads
    pattern: DFPattern
    annotations: Mapping[str, DFPattern] = field(default_factory=dict)
    check: Callable[[relax.transform.PatternCheckContext], bool] | None = None
    # Matched once before the graph's constants fold as well: a pattern that takes a
    # constant's transpose as it is, which folding would copy (see partition).
    before_folding: bool = False

    def fusion_pattern(self) -> relax.transform.FusionPattern:
        from tvm import relax

        return relax.transform.FusionPattern(self.name, self.pattern, dict(self.annotations),
                                             self.check)


# What a plugin's runtime that derives data from weights on a first run (oneDNN's packed
# copies) may export: given an engine-cache entry's folder, it keeps that data there for the
# processes that load the entry later. Loaders of cache entries call it before the first run.
KEEP_PACKED_WEIGHTS_FUNCTION = "odla_keep_packed_weights"

# The module attribute naming the reduced precision a computation asks for (one of
# relay_bridge.PRECISIONS), and the item partitioning gives a plugin it in.
PRECISION_ATTR = "reduced_precision"
PRECISION_ITEM = "precision"
# The module attribute in which a plugin's prepare names the items (a map of strings) it
# found for its patterns; partitioning adds them to those ``patterns`` is given.
PREPARED_ITEMS_ATTR = "plugin_prepared_items"


def _nothing_needed() -> None:
    return None


def _no_options() -> list[str]:
    return []


@dataclass(frozen=True)
class VendorPlugin:
    """A vendor library behind an ODLA device."""

    name: str  # the codegen's name: composites are "<name>.<what>", the codegen relax.ext.<name>
    device_name: str  # the ODLA DeviceName member it serves, e.g. "INTEL_DNNL"
    description: str
    # The patterns it takes, given the computation's items for this plugin (see ``items``).
    patterns: Callable[[Mapping[str, object]], Sequence[PluginPattern]]
    # The regions RunCodegen gives it (relax Functions holding composite calls; see
    # composite_steps) and the items, to runtime modules that export_library links, e.g.
    # static_library(...).
    codegen: Callable[[list[relax.Function], Mapping[str, object]], list[tvm.runtime.Module]]
    link_options: Callable[[], list[str]] = _no_options  # for export_library: -L, -l, rpath
    check_available: Callable[[], None] = _nothing_needed  # raises PluginUnavailable
    # Vendor-specific computation items it understands, "<name>.<item>" -> what it means and
    # the value it takes; set_computation_item(computation, "<name>.<item>", value) sets them.
    items: Mapping[str, str] = field(default_factory=dict)
    # Checks an item's value: raises ValueError saying what it expects, else returns it.
    check_item: Callable[[str, object], object] = lambda _name, value: value
    # A rewrite of the whole module before partitioning (a layout change, say), given the
    # items as ``patterns`` is, or None; it may add items for ``patterns`` (PREPARED_ITEMS_ATTR).
    prepare: Callable[[tvm.IRModule, Mapping[str, object]], tvm.IRModule] | None = None
    # Why it leaves a whole graph to TVM's own code, which runs that graph faster, or None;
    # asked on targets that let it (TargetSpec.plugins_may_decline).
    declines: Callable[[tvm.IRModule], str | None] = lambda _mod: None
    # Whether its regions compute a reduced precision (relay_bridge.PRECISIONS) in its own
    # kernels: the graph then stays float32, its heavy ops' weights rounded, and partitioning
    # gives the plugin the precision as the item "precision" (PRECISION_ITEM).
    computes: Callable[[str], bool] = lambda _precision: False
    # What besides the graph decides the code it builds here (the CPU class its library
    # reaches, say): part of an engine's cache key, so that an engine built for another is
    # not loaded.
    code_key: Callable[[], str] = lambda: ""
    # How many times TVM's idle pool workers poll for the next kernel in a process running its
    # regions (registry.default_pool_spin), or None for targets.runtime's; set when a module
    # with its regions is built or first run (targets.runtime), before the pool starts.
    pool_spin: int | None = None


_PLUGINS: dict[str, VendorPlugin] = {}
# The plugins odla-tvm ships (declared as entry points too, for listing), found by name
# without reading every installed package's entry points: a cached load looks up no other.
BUILT_IN = {"onednn": "targets.plugins.onednn"}
_entry_points_loaded = False
_load_lock = threading.Lock()


def register_plugin(plugin: VendorPlugin) -> VendorPlugin:
    """Makes ``plugin`` available by name (entry points do this for installed packages)."""
    if not isinstance(plugin, VendorPlugin):
        raise TypeError(f"register_plugin expects a targets.VendorPlugin, got {type(plugin).__name__}")
    _PLUGINS[plugin.name] = plugin
    return plugin


def _load_entry_points() -> None:
    global _entry_points_loaded
    with _load_lock:
        if _entry_points_loaded:
            return
        _entry_points_loaded = True
        from importlib import metadata  # a plugin's first look-up: at a compile, not an import

        for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                loaded = entry.load()
                register_plugin(loaded() if callable(loaded) else loaded)
            except Exception as err:  # a broken third-party plugin must not break the others
                log.warning("plugin entry point %s = %s failed to load: %s; it is skipped",
                            entry.name, entry.value, err)


def reload_plugins() -> None:
    """Reads the entry points again (after a package was installed in this process)."""
    global _entry_points_loaded
    _entry_points_loaded = False
    _load_entry_points()


def plugin_computes(spec, precision: str) -> bool:
    """Whether a vendor plugin of target ``spec`` computes ``precision`` itself."""
    return any(get_plugin(name).computes(precision) for name in spec.plugins)


def get_plugin(name: str) -> VendorPlugin:
    if name not in _PLUGINS and name in BUILT_IN:
        register_plugin(importlib.import_module(BUILT_IN[name]).PLUGIN)
    if name not in _PLUGINS:
        _load_entry_points()
    if name not in _PLUGINS:
        raise KeyError(f"unknown vendor plugin {name!r}; available: "
                       f"{', '.join(sorted(_PLUGINS)) or 'none'}")
    return _PLUGINS[name]


def device_plugin(device_name: str) -> VendorPlugin | None:
    """The plugin serving ODLA device ``device_name`` (a DeviceName's name), if any: one
    built in is found without reading entry points."""
    for name in BUILT_IN:
        plugin = get_plugin(name)
        if plugin.device_name == device_name:
            return plugin
    return next((p for p in available_plugins() if p.device_name == device_name), None)


def available_plugins() -> list[VendorPlugin]:
    _load_entry_points()
    return [_PLUGINS[n] for n in sorted(_PLUGINS)]


def check_item(name: str, value) -> object:
    """``value`` as plugin item ``name`` ("<plugin>.<item>") takes it; KeyError for an item
    no plugin declares, ValueError for a value the plugin refuses (messages say why)."""
    plugin_name = name.split(".", 1)[0]
    plugin = get_plugin(plugin_name)
    if name not in plugin.items:
        raise KeyError(f"the {plugin.name} plugin has no item {name!r}; its items: "
                       f"{', '.join(sorted(plugin.items)) or 'none'}")
    return plugin.check_item(name, value)


# name -> the module defining it, imported (with TVM's compiler) on first use.
_COMPILING = {"partition": ".partitioning", "offloaded_regions": ".partitioning",
              "Step": ".regions", "composite_steps": ".regions", "static_library": ".regions"}


__getattr__ = compiling_attributes(__name__, _COMPILING)
