"""The bridge's lowerings, one module per op family; importing the package registers every one
(``bridge.registry``): ``elementwise`` (maths, comparisons, logic, activations, casts),
``reduction`` (sums, extrema, statistics, norms, cumsum), ``nn`` (normalizations, softmax,
dropout, pooling), ``shape`` (views, slices, concatenation, padding, rolls, repeats),
``indexing`` (index reads: index_select, gather, embedding, advanced indexing), ``library``
(convolution, GEMMs, attention, upsampling: vendor-library IR ops) and ``factory`` (tensors
built from sizes: full, arange, the ``_like`` and ``new_`` forms)."""

from . import elementwise, factory, indexing, library, nn, reduction, shape  # noqa: F401
