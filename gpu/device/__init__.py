"""The twin's device machinery: what only a GPU needs, and the reference has no file for.

The reference has one memory and no kernels. Every file of gpu/ above this package mirrors a
file of reference/ (tests/twin/test_layout.py holds it); these do not:

    backend.py         `xp` (CuPy or NumPy), the two doors between the memories (`to_device`,
                       `to_host`, counted), `counting_launches()`, `fuse`
    counting.py        the counting device: a NumPy stand-in for a CUDA device whose arrays
                       count their launches and refuse hidden host syncs
    kernels.cu         the six fused CUDA kernels
    kernels.py         how a fused kernel runs (compiled on a device, one counted launch on the
                       counting device, its body otherwise) and whether the kernels are on
    fused.py           the fused operations of the model's forward (body + plan each), and the
                       plans of the sampling and verification kernels
    layers.py          the layer functions with `xp` (GELU, softmax, LayerNorm, attention)
    batch_drafting.py  every row of a ragged batch drafting in one pass per step
    roofline.py        each kernel's bytes, FLOPs, blocks and longest serial chain, from the
                       launch plans, and the time each bound predicts on an H200

The mirrored files build on these; of these, only batch_drafting.py imports mirrored ones
(gpu.drafters, gpu.sampling), and of the mirrored ones only gpu/batch.py imports it. This
package's own __init__ imports nothing.
"""
