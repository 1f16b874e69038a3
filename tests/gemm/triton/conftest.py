"""Run the Triton kernels of this folder on CPU through Triton's interpreter.

``TRITON_INTERPRET`` is read when a kernel is decorated, i.e. when its module is first
imported; the kernel modules are imported inside the tests, after this file has run.

The interpreter's scalars are one-element arrays, which ``range(start, end)`` in a kernel turns
into ints with ``int(array)``: NumPy 2.4 refuses that for arrays of one dimension (Triton 3.6's
interpreter), so ``__index__`` converts with ``.item()`` here (as in ``tests/mla/triton``).
"""

import os

os.environ["TRITON_INTERPRET"] = "1"


def _patch_scalar_index():
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor
    if getattr(patch_tensor, "indexes_by_item", False):
        return

    def patch_tensor_by_item(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    patch_tensor_by_item.indexes_by_item = True
    interpreter._patch_lang_tensor = patch_tensor_by_item


_patch_scalar_index()
