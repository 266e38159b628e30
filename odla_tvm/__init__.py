"""odla-tvm: the Open Deep Learning API (ODLA 0.5) on Apache TVM.

Each ODLA C function ``odla_XxxYyy`` is ``xxx_yyy`` here with the same parameters in the same
order; results are returned and failures raise ``OdlaError`` carrying an ODLA ``Status``.
Op functions add to the thread's current computation, as in ODLA.
"""

import importlib
from typing import TYPE_CHECKING

from .computation import (
    Computation,
    Value,
    ValueKind,
    create_argument,
    create_computation,
    create_constant,
    create_value,
    create_variable,
    destroy_computation,
    find_value_by_id,
    get_arg_from_computation_by_idx,
    get_num_of_args_from_computation,
    get_num_of_outputs_from_computation,
    get_output_from_computation_by_idx,
    get_value_id,
    get_value_type,
    release_value,
    set_computation_item,
    set_value_as_output,
    set_value_as_output_by_id,
    set_value_data,
    set_value_data_by_id,
    set_value_shape_info,
    set_values_as_output,
)
from .context import (
    Context,
    bind_to_argument,
    bind_to_argument_by_id,
    bind_to_output,
    bind_to_output_by_id,
    create_context,
    destroy_context,
    get_runtime_shape,
    get_value_data,
    set_context_item,
    set_runtime_shape,
)
from .device import Device, allocate_device, available_devices, destroy_device, get_device_info
from .execution import execute_computation
from .executable import (
    Executable,
    compile_computation,
    destroy_executable,
    get_arg_from_executable_by_idx,
    get_num_of_args_from_executable,
    get_num_of_outputs_from_executable,
    get_output_from_executable_by_idx,
    launch_executable,
    load_executable,
    store_executable,
)
from .ops.basic import clone_value, clone_value_by_id
from .ops.control_flow import (
    begin_if,
    begin_loop,
    create_loop_variable,
    end_if,
    end_loop,
    enter_branch_body,
)
from .ops.custom import custom_op, register_custom_op
from .ops.math import (
    abs,
    acos,
    acosh,
    add,
    and_,
    arg_max,
    arg_min,
    asin,
    asinh,
    atan,
    atanh,
    batch_mat_mul,
    ceil,
    clamp,
    cos,
    cosh,
    cum_sum,
    det,
    div,
    einsum,
    equal,
    erf,
    exp,
    floor,
    gemm,
    greater,
    greater_or_equal,
    inverse,
    is_inf,
    is_nan,
    less,
    less_or_equal,
    log,
    max,
    mean,
    min,
    mod,
    mul,
    neg,
    not_,
    not_equal,
    or_,
    pow,
    reciprocal,
    reduce_l1,
    reduce_l2,
    reduce_log_sum,
    reduce_log_sum_exp,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    reduce_sum_square,
    round,
    round_half_to_even,
    rsqrt,
    select,
    shift,
    sign,
    sin,
    sinh,
    sqrt,
    squared_difference,
    sub,
    tan,
    tanh,
    xor,
)
from .ops.nn import (
    average_pool,
    batch_normalization,
    celu,
    conv,
    de_conv,
    elu,
    gelu,
    group_normalization,
    gru,
    hard_sigmoid,
    hard_swish,
    hardmax,
    instance_normalization,
    layer_norm,
    leaky_relu,
    log_softmax,
    lp_normalize,
    lrn,
    lstm,
    max_pool,
    multi_head_attention,
    negative_log_likeli_hood_loss,
    nms,
    prelu,
    relu,
    rnn,
    roi_align,
    roi_max_pool,
    selu,
    shrink,
    sigmoid,
    softmax,
    softplus,
    softsign,
    swish,
    tfidf_vectorize,
    thresholded_relu,
    topk,
)
from .ops.process import (
    bit_cast,
    broadcast,
    cast,
    compress,
    concat,
    dims_expand,
    expand_dims,
    fill,
    gather,
    gather_elements,
    gather_nd,
    one_hot,
    pad,
    reshape,
    reshape_dynamic,
    resize,
    resize_dynamic,
    shape,
    slice,
    slice_dynamic,
    split,
    squeeze,
    stack,
    tile,
    tile_dynamic,
    transpose,
)
from .profiler import DeviceTrace, retrieve_device_trace, start_device_profiler, stop_device_profiler
from .ops.quantization import dequantize, quantize
from .types import (
    ODLA_API_VERSION,
    Bf16Mode,
    ComputeMode,
    DeviceInfo,
    DeviceName,
    ElementType,
    FillMethod,
    InterpolationMode,
    ItemType,
    LoopOutputMode,
    MemoryLayout,
    RnnDirection,
    RnnGateOrder,
    RnnOutputs,
    RnnWeightFormat,
    ReductionMode,
    TfIdfMode,
    OdlaError,
    ResizeCoordinateMode,
    ResourceLocationType,
    Status,
    ValueShape,
    ValueType,
    VendorName,
)
from .version import odla_tvm_version

if TYPE_CHECKING:  # the names below, for editors and type checkers (tests/test_rules.py)
    from .asynchronous import (Event, Task, async_execute_computation, async_launch_executable,
                               run_task, run_task_async, set_async_executor)
    from .bundle import export
    from .memory import (DeviceMemory, MemcpyType, allocate_device_memory, allocate_host_memory,
                         copy_memory, free_device_memory, free_host_memory)
    from .session import Session
    from .training import (compile_inference, differentiate_computation, get_optimizer,
                           load_checkpoint, set_optimizer, store_checkpoint)
    from .tuning import tune

# name -> the module defining it, imported at the name's first use: asynchronous runs, bundles,
# device memory, sessions (and their engine cache), tuning and training stay out of
# `import odla_tvm` until a program uses them.
_ON_FIRST_USE = {
    "Event": ".asynchronous", "Task": ".asynchronous",
    "async_execute_computation": ".asynchronous", "async_launch_executable": ".asynchronous",
    "run_task": ".asynchronous", "run_task_async": ".asynchronous",
    "set_async_executor": ".asynchronous",
    "export": ".bundle",
    "DeviceMemory": ".memory", "MemcpyType": ".memory", "allocate_device_memory": ".memory",
    "allocate_host_memory": ".memory", "copy_memory": ".memory", "free_device_memory": ".memory",
    "free_host_memory": ".memory",
    "Session": ".session",
    "tune": ".tuning",
    "compile_inference": ".training", "differentiate_computation": ".training",
    "get_optimizer": ".training", "load_checkpoint": ".training", "set_optimizer": ".training",
    "store_checkpoint": ".training",
}


def __getattr__(name: str):
    if name == "__version__":  # read from the installed package's metadata
        return odla_tvm_version()
    if name not in _ON_FIRST_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_ON_FIRST_USE[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_ON_FIRST_USE, "__version__"})
