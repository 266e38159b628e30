"""odla-tvm: the Open Deep Learning API (ODLA 0.5) on Apache TVM.

Each ODLA C function ``odla_XxxYyy`` is ``xxx_yyy`` here with the same parameters in the same
order; results are returned and failures raise ``OdlaError`` carrying an ODLA ``Status``.
Op functions add to the thread's current computation, as in ODLA.
"""

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
from .asynchronous import (
    Event,
    Task,
    async_execute_computation,
    async_launch_executable,
    run_task,
    run_task_async,
    set_async_executor,
)
from .bundle import export
from .device import Device, allocate_device, available_devices, destroy_device, get_device_info
from .executable import (
    Executable,
    compile_computation,
    destroy_executable,
    execute_computation,
    get_arg_from_executable_by_idx,
    get_num_of_args_from_executable,
    get_num_of_outputs_from_executable,
    get_output_from_executable_by_idx,
    launch_executable,
    load_executable,
    store_executable,
)
from .ops.math import (
    abs,
    add,
    batch_mat_mul,
    clamp,
    div,
    exp,
    gemm,
    log,
    max,
    min,
    mul,
    neg,
    pow,
    reduce_max,
    reduce_mean,
    reduce_sum,
    sqrt,
    sub,
    tanh,
)
from .ops.nn import (
    average_pool,
    batch_normalization,
    conv,
    de_conv,
    gelu,
    leaky_relu,
    log_softmax,
    max_pool,
    relu,
    sigmoid,
    softmax,
)
from .ops.process import cast, concat, expand_dims, gather, pad, reshape, slice, squeeze, transpose
from .memory import (
    DeviceMemory,
    MemcpyType,
    allocate_device_memory,
    allocate_host_memory,
    copy_memory,
    free_device_memory,
    free_host_memory,
)
from .profiler import DeviceTrace, retrieve_device_trace, start_device_profiler, stop_device_profiler
from .session import Session
from .types import (
    ODLA_API_VERSION,
    Bf16Mode,
    ComputeMode,
    DeviceInfo,
    DeviceName,
    ElementType,
    ItemType,
    MemoryLayout,
    OdlaError,
    ResourceLocationType,
    Status,
    ValueShape,
    ValueType,
    VendorName,
)
from .version import __version__
