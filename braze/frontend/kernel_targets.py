"""Assignments to vectors in a `@bz.kernel` body: vector locals, elements of arrays of vectors, and
components (`v.x = ...`, `x[i] += f`, `x[i][1] -= d`, `m[0, 1] = ...`).

A mixin of the Translator (braze.frontend.kernel_ast). A target is resolved into `Places`: one
scalar place (a local variable or an array element) per component, so every assignment to a
vector is one Kernel IR statement per component. `+=` and `-=` on array elements that are not
provably the thread's own are atomic component by component, as for scalars.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass

from braze import dtypes as dt
from braze.errors import KernelTypeError
from braze.frontend import kernel_types as ty
from braze.frontend import kernel_vector_components as parts
from braze.frontend import kernel_vectors as vec
from braze.frontend.kernel_scope import ArrayHandle, Local, LocalArray, VectorLocal, VectorValue
from braze.kir import nodes as k


@dataclass(frozen=True)
class Place:
    """One scalar storage place: a local variable, an element of an array parameter, or an element of
    a `bz.local` array."""

    var: k.Var | None = None
    param: k.ArrayParam | None = None
    indices: tuple[k.Expr, ...] = ()
    local: k.Var | None = None  # a bz.local array (indices has one index)
    # One of several places chosen at run time (`p[d]` of a local vector): choices[chooser], the last
    # where no other matches, as a read of `p[d]` is.
    choices: tuple[Place, ...] = ()
    chooser: k.Expr | None = None

    def read(self) -> k.Expr:
        if self.choices:
            return parts.select_component(VectorValue(vec.type_of_shape((len(self.choices),), self.dtype),
                                                      tuple(c.read() for c in self.choices)), self.chooser)
        if self.local is not None:
            return k.LoadLocal(self.local, self.indices[0], self.local.dtype)
        return self.var if self.var is not None else k.Load(self.param, self.indices)

    def write(self, value: k.Expr) -> k.Stmt:
        if self.choices:
            chosen = self.choices[-1].write(value)
            for position in reversed(range(len(self.choices) - 1)):
                chosen = k.If(ty.binary("eq", self.chooser, position), (self.choices[position].write(value),),
                              (chosen,))
            return chosen
        if self.local is not None:
            return k.StoreLocal(self.local, self.indices[0], value)
        return k.Assign(self.var, value) if self.var is not None else k.Store(self.param, self.indices, value)

    @property
    def dtype(self):
        return self.choices[0].dtype if self.choices else (self.var or self.local or self.param).dtype

    @property
    def shared(self) -> bool:
        """An element of an array parameter: other threads may reach it."""
        return self.param is not None


@dataclass(frozen=True)
class Places:
    """The places of a target: one (type None) for a scalar, one per component for a vector."""

    type: vec.VectorType | None
    items: tuple[Place, ...]

    def value(self):
        reads = tuple(p.read() for p in self.items)
        return reads[0] if self.type is None else VectorValue(self.type, reads)


class TargetTranslator:
    """The assignment half for vectors; relies on the Translator's expr, subscript, lookup, emit,
    declare, new_var, owns, in_parallel_task, updated_atomically, checked and error methods."""

    # --- resolving targets ------------------------------------------------------------------------
    def array_places(self, handle: ArrayHandle, indices: tuple[k.Expr, ...]) -> Places:
        """The places of `array[indices]`: one element, or every component of the vector there."""
        return _places_below(handle.param, indices, handle.element.shape[len(handle.element.shape) -
                                                                        (handle.param.ndim - len(indices)):]
                             if handle.element is not None else ())

    def plain_array_target(self, target: ast.expr) -> bool:
        """`a[...]` of an array of scalars (the assignments the scalar path takes)."""
        if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
            return False
        bound = self.expr(target.value)
        return isinstance(bound, ArrayHandle) and bound.element is None

    def target_places(self, target: ast.expr) -> Places | None:
        """The places a target names, or None when it names none (a new local, say)."""
        if isinstance(target, ast.Name):
            frame = self.frames[-1]
            bound = frame.names.get(target.id)
            if isinstance(bound, VectorLocal):
                return Places(bound.type, tuple(Place(var=v) for v in bound.vars))
            if isinstance(bound, Local) and not bound.loop_index:
                return Places(None, (Place(var=bound.var),))
            return None
        if isinstance(target, ast.Subscript):
            base = self.expr(target.value) if isinstance(target.value, ast.Name) else None
            if isinstance(base, ArrayHandle):
                handle, indices = self.subscript(target)
                return self.array_places(handle, indices)
            if isinstance(base, LocalArray):
                return Places(base.element, tuple(Place(local=base.var, indices=(i,)) for i in
                                                  base.component_indices(self.local_index(target, base))))
            places = self.target_places(target.value)
            if places is None:
                return None
            key = self.expr(target.slice)
            for part in key if isinstance(key, tuple) else (key,):
                places = self.component_places(target, places, part)
            return places
        if isinstance(target, ast.Attribute):
            places = self.target_places(target.value)
            if places is None or places.type is None:
                return None
            position = self.checked(target, lambda: parts.component_position(places.type, target.attr))
            return Places(None, (places.items[position],))
        return None

    def component_places(self, node: ast.AST, places: Places, key) -> Places:
        if places.type is None:
            self.error(node, "subscript of a scalar", KernelTypeError)
        vtype = places.type
        if not isinstance(key, k.Expr):
            positions, shape = self.checked(node, lambda: parts.constant_positions(vtype, key))
            chosen = tuple(places.items[p] for p in positions)
            return Places(vec.type_of_shape(shape, vtype.dtype) if shape else None, chosen)
        index = self.checked(node, lambda: ty.index(key, f"index of a {vtype!r}"))
        if not all(p.shared for p in places.items):
            if self.debug:
                where, text = self.frames[-1].source.where(node)
                inside = ty.binary("logical_and", ty.binary("ge", index, 0), ty.binary("lt", index, vtype.shape[0]))
                self.emit(k.Assert(inside, f"{where}index out of bounds: a {vtype!r} component in {text}"))
            return _chosen_places(places, index)
        first = places.items[0]
        prefix = first.indices[:len(first.indices) - len(vtype.shape)]
        return _places_below(first.param, (*prefix, index), vtype.shape[1:])

    # --- writing ----------------------------------------------------------------------------------
    def component_values(self, value, places: Places, what: str) -> list:
        """The value for each place: a scalar for a scalar place, the components of a vector of the
        same shape for a vector's places."""
        if places.type is None:
            if isinstance(value, VectorValue):
                raise ty.TypeProblem(f"{what} is a {places.items[0].dtype.name} scalar, the value is a "
                                     f"{value.type_name}; take a component (v.x, v[0]) or a scalar function of it")
            return [value]
        if not isinstance(value, VectorValue):
            raise ty.TypeProblem(f"{what} is a {places.type!r}, the value is {vec.describe(value)}; build a "
                                 f"vector ({places.type!r}(...); {places.type!r}() for zeros)")
        if value.type.shape != places.type.shape:
            raise ty.TypeProblem(f"{what} is a {places.type!r}, the value is a {value.type_name}")
        return list(value.items)

    def write_places(self, node: ast.AST, places: Places, value, what: str) -> None:
        values = self.evaluated(self.checked(node, lambda: self.component_values(value, places, what)))
        for place, v in zip(places.items, values):
            stored = self.stored(node, v, place.dtype, what)
            self.emit(place.write(stored))

    def evaluated(self, values: list) -> list:
        """Every component computed before any is stored: `x[i] = bz.normalize(x[i])` stores x[i].y after
        x[i].x, and must not read the new x[i].x for it."""
        return values if len(values) == 1 else [self.temporary(v) for v in values]

    def assign_target(self, target: ast.expr, value, node: ast.AST) -> None:
        """`target = value` for a component or a vector element."""
        places = self.target_places(target)
        if places is None:
            self.error(node, f"unsupported construct: assignment to {type(target).__name__}")
        self.write_places(node, places, value, f"'{ast.unparse(target)}'")

    def aug_assign_target(self, node: ast.AugAssign, op: str) -> None:
        """`target op= value` for a component or a vector element: atomic per component where the
        element is not provably the thread's own."""
        places = self.target_places(node.target)
        if places is None:
            self.error(node, f"unsupported construct: augmented assignment to {type(node.target).__name__}")
        what = f"'{ast.unparse(node.target)}'"
        value = self.expr(node.value)
        parallel = self.in_parallel_task()
        shared = [p for p in places.items
                  if p.shared and parallel and self.updated_atomically(p.param, p.indices, op)]
        if not shared:
            self.write_places(node, places, self.binary(node, op, places.value(), value), what)
            return
        if op not in ty.ATOMIC_AUGMENTED or places.items[0].param.dtype.name not in ty.ATOMIC_DTYPES:
            self.error(node, f"{what} {op} in a parallel loop: the element is not provably this thread's own, and "
                             f"only += and -= on arrays of {', '.join(ty.ATOMIC_DTYPES)} have an atomic form",
                       KernelTypeError)
        broadcast = value if isinstance(value, VectorValue) or places.type is None else \
            VectorValue(places.type, (value,) * len(places.items))
        values = self.evaluated(self.checked(node, lambda: self.component_values(broadcast, places, what)))
        for place, v in zip(places.items, values):
            self.atomic_updates.add(place.param.name)
            v = self.stored(node, v, place.dtype, what)
            self.emit(k.AtomicRMW(op, place.param, place.indices, v, None))

    # --- vector locals ----------------------------------------------------------------------------
    def vector_local(self, name: str, value: VectorValue) -> VectorLocal:
        """A new local holding `value`: one variable per component (`v_x`, `m_01`, ...)."""
        suffixes = ("xyzw"[:value.type.shape[0]] if not value.type.is_matrix else
                    [f"{i}{j}" for i in range(value.type.shape[0]) for j in range(value.type.shape[1])])
        variables = []
        for suffix, item in zip(suffixes, value.items):
            if self.depth == 0:
                var = self.new_var(f"{name}_{suffix}", value.type.dtype)
                self.emit(k.Let(var, ty.as_expr(item, value.type.dtype)))
            else:
                var = self.declare(f"{name}_{suffix}", value.type.dtype)
                self.emit(k.Assign(var, ty.as_expr(item, value.type.dtype)))
            variables.append(var)
        return VectorLocal(value.type, tuple(variables))

    def assign_vector_name(self, name: str, value, node: ast.AST) -> None:
        """`name = value` where either side is a vector."""
        frame = self.frames[-1]
        bound = frame.names.get(name)
        if isinstance(bound, VectorLocal):
            places = Places(bound.type, tuple(Place(var=v) for v in bound.vars))
            self.write_places(node, places, value, f"'{name}'")
        elif isinstance(bound, Local):
            self.error(node, f"type mismatch: '{name}' is a {bound.var.dtype.name}, the value is a "
                             f"{vec.describe(value)}; use another name", KernelTypeError)
        else:
            frame.names[name] = self.vector_local(name, value)


def _places_below(param: k.ArrayParam, indices: tuple[k.Expr, ...], shape: tuple[int, ...]) -> Places:
    """The places of `param[indices]`, whose remaining axes have the static `shape`."""
    if not shape:
        return Places(None, (Place(param=param, indices=indices),))
    combos = itertools.product(*(range(n) for n in shape))
    items = tuple(Place(param=param, indices=(*indices, *(k.Const(c, dt.int64) for c in combo))) for combo in combos)
    return Places(vec.type_of_shape(shape, param.dtype), items)


def _chosen_places(places: Places, index: k.Expr) -> Places:
    """The places of `v[index]` of a local vector or matrix, `index` known only at run time: for each
    component of the part chosen (a matrix's row), the place among the rows that `index` picks."""
    rows = places.type.shape[0]
    width = len(places.items) // rows
    items = tuple(Place(choices=tuple(places.items[r * width + c] for r in range(rows)), chooser=index)
                  for c in range(width))
    rest = places.type.shape[1:]
    return Places(vec.type_of_shape(rest, places.type.dtype) if rest else None, items)
