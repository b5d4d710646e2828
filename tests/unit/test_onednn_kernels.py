"""benchmarks/onednn_kernels.py's reading of oneDNN's verbose lines, in TensorFlow's and in PyTorch's format."""

import sys

from tests.helpers import REPO

sys.path.append(str(REPO / "benchmarks"))
from onednn_kernels import kernel_times  # noqa: E402  (benchmarks/ is not a package)

CONV1 = "mb64_ic1oc32_ih28oh28kh5sh1dh0ph2_iw28ow28kw5sw1dw0pw2"
# Lines as TF 2.15.1 and torch 2.13.0 wrote them (2026-11-24, ONEDNN_VERBOSE=1, ONEDNN_MAX_CPU_ISA=AVX2).
TENSORFLOW = [
    "onednn_verbose,info,cpu,isa:Intel AVX2",
    "onednn_verbose,exec,cpu,reorder,jit:uni,undef,src_f32::blocked:cdba::f0 dst_f32::blocked:Acdb8a::f0,,,32x1x5x5,"
    "0.00292969",
    "onednn_verbose,exec,cpu,convolution,jit:avx2,forward_training,src_f32::blocked:acdb::f0 wei_f32:a:blocked:Acdb8a"
    "::f0 bia_f32:a:blocked:a::f0 dst_f32::blocked:acdb::f0,attr-scratchpad:user attr-post-ops:eltwise_relu ,"
    f"alg:convolution_direct,{CONV1},3.5",
    f"onednn_verbose,exec,cpu,convolution,jit:avx2,forward_training,src_f32::blocked:acdb::f0,,,{CONV1},1.5",
    "2026-11-24 09:52:10,000 worker:0 INFO loss = 2.3, step = 1",
]
PYTORCH = [
    "onednn_verbose,v1,info,cpu,runtime:OpenMP,nthr:1",
    "onednn_verbose,v1,primitive,exec,cpu,convolution,jit:avx2,forward_training,src:f32:a:blocked:abcd::f0 "
    "wei:f32:a:blocked:Acdb8a::f0 bia:f32:a:blocked:a::f0 dst:f32:a:blocked:aBcd8b::f0,attr-scratchpad:user,"
    f"alg:convolution_direct,{CONV1},17.6648",
]


def test_tensorflow_s_lines_are_summed_per_kernel_and_other_lines_ignored():
    assert kernel_times(TENSORFLOW) == {("reorder", "jit:uni", "undef", "32x1x5x5"): 0.00292969,
                                        ("convolution", "jit:avx2", "forward_training", CONV1): 5.0}


def test_pytorch_s_lines_with_their_version_prefix_name_the_same_fields():
    assert kernel_times(PYTORCH) == {("convolution", "jit:avx2", "forward_training", CONV1): 17.6648}
