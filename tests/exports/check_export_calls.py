#!/usr/bin/env python3
# The FSDP2 export checker: reads a generated fsdp2_plan.py with `ast` (no torch needed) and checks every torch /
# torchao / PEFT / transformers call against the real signatures (torch_signatures.py), plus one rule per known
# failure of issue 31: one root init_device_mesh, every mesh handed to fully_shard / parallelize_module a slice of
# it, TP on its "tp" dimension with full-length rotary positions, and a plan with expert parallelism carrying it.
#
#   check_export_calls.py FILE...   prints each file's checks; exit 1 when any fails, 2 on unreadable input.
import ast
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_signatures as sigs  # noqa: E402

LIBRARIES = ("torch", "torchao", "peft", "transformers")
CHECKS = ["imports", "signatures", "values", "one root mesh", "mesh slices", "TP on tp", "EP carried"]


class Failure(Exception):
    pass


class Script:
    def __init__(self, path):
        with open(path, encoding="utf-8") as stream:
            self.source = stream.read()
        self.tree = ast.parse(self.source, path)
        self.tables = {}  # module-level NAME = literal
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    self.tables[node.targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
        self.functions = {node.name: node for node in ast.walk(self.tree) if isinstance(node, ast.FunctionDef)}
        self.enclosing = {}  # node -> its FunctionDef
        for function in self.functions.values():
            for node in ast.walk(function):
                self.enclosing.setdefault(node, function)
        self.imports = {}  # local name -> qualified name
        self.import_nodes = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom):
                self.import_nodes.append(node)
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = node.module + "." + alias.name
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    self.imports[alias.asname or alias.name.split(".")[0]] = alias.name.split(".")[0]
        # Local aliases of imported callables: `block_colwise, ... = ColwiseParallel, ...`.
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target, value = node.targets[0], node.value
            pairs = []
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                pairs = list(zip(target.elts, value.elts))
            elif isinstance(target, ast.Name):
                pairs = [(target, value)]
            for name, aliased in pairs:
                if isinstance(name, ast.Name) and isinstance(aliased, ast.Name) and aliased.id in self.imports:
                    self.imports[name.id] = self.imports[aliased.id]
        self.calls = [node for node in ast.walk(self.tree) if isinstance(node, ast.Call)]

    def qualified(self, func):
        """torch.distributed.fsdp.fully_shard for `fully_shard`, torch.compile for `torch.compile`, else None."""
        if isinstance(func, ast.Name):
            return self.imports.get(func.id)
        if isinstance(func, ast.Attribute):
            base = self.qualified(func.value)
            return base + "." + func.attr if base else None
        return None

    def calls_to(self, qualified_name):
        return [call for call in self.calls if self.qualified(call.func) == qualified_name]

    def table(self, name, default=None):
        return self.tables.get(name, default)


def keyword_names(script, call):
    """The keywords a call passes, a **NAME expanded from the module-level dict literal NAME."""
    names = []
    for keyword in call.keywords:
        if keyword.arg is not None:
            names.append(keyword.arg)
        elif isinstance(keyword.value, ast.Name) and isinstance(script.table(keyword.value.id), dict):
            names.extend(script.table(keyword.value.id).keys())
        elif isinstance(keyword.value, ast.Name) and script.table(keyword.value.id, "") is None and \
                guarded_by_none_return(script, call, keyword.value.id):
            continue  # `if NAME is None: return` before it: the call is reached only with a dict
        else:
            raise Failure(f"line {call.lineno}: **{ast.unparse(keyword.value)} is not a module-level dict literal")
    return names


def guarded_by_none_return(script, call, name):
    """Whether the call's function returns early on `if NAME is None:` before the call."""
    function = script.enclosing.get(call)
    for node in ast.walk(function) if function else ():
        test = getattr(node, "test", None)
        if (isinstance(node, ast.If) and node.lineno < call.lineno and isinstance(test, ast.Compare)
                and isinstance(test.left, ast.Name) and test.left.id == name and isinstance(test.ops[0], ast.Is)
                and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None
                and isinstance(node.body[-1], ast.Return)):
            return True
    return False


def check_call(script, call, name, signature):
    where = f"line {call.lineno}: {name}"
    if any(isinstance(arg, ast.Starred) for arg in call.args) and not signature.var_positional:
        raise Failure(f"{where}: *args cannot be checked")
    if len(call.args) > len(signature.positional) and not signature.var_positional:
        raise Failure(f"{where}: {len(call.args)} positional arguments, it takes {len(signature.positional)} "
                      f"({signature.source})")
    given = signature.positional[:len(call.args)]
    for keyword in keyword_names(script, call):
        if keyword not in signature.names() and not signature.var_keyword:
            raise Failure(f"{where}: no parameter '{keyword}' ({signature.source})")
        if keyword in given:
            raise Failure(f"{where}: '{keyword}' given twice")
        given.append(keyword)
    for required in signature.required:
        if required not in given:
            raise Failure(f"{where}: missing '{required}' ({signature.source})")


def check_imports(script):
    for node in script.import_nodes:
        if node.module.split(".")[0] not in LIBRARIES:
            continue
        exported = sigs.MODULE_EXPORTS.get(node.module)
        if exported is None:
            raise Failure(f"line {node.lineno}: module {node.module} is not in the signature table")
        for alias in node.names:
            if alias.name not in exported:
                raise Failure(f"line {node.lineno}: {node.module} has no {alias.name}")
    return f"{len(script.import_nodes)} from-imports"


def check_signatures(script):
    checked = 0
    for call in script.calls:
        name = script.qualified(call.func)
        if name and name.split(".")[0] in LIBRARIES:
            if name not in sigs.CALLABLES:
                raise Failure(f"line {call.lineno}: {name} is not in the signature table")
            check_call(script, call, name, sigs.CALLABLES[name])
            checked += 1
        elif isinstance(call.func, ast.Attribute) and call.func.attr in sigs.METHODS:
            check_call(script, call, call.func.attr, sigs.METHODS[call.func.attr])
            checked += 1
    return f"{checked} calls"


def literal_keyword(call, name):
    for keyword in call.keywords:
        if keyword.arg == name:
            return ast.literal_eval(keyword.value)
    return None


def check_values(script):
    for call in script.calls_to("torchao.float8.Float8LinearConfig.from_recipe_name"):
        recipe = ast.literal_eval(call.args[0])
        if recipe not in sigs.FLOAT8_RECIPES:
            raise Failure(f"line {call.lineno}: float8 recipe '{recipe}', expected one of {sorted(sigs.FLOAT8_RECIPES)}")
    lora = script.table("LORA_CONFIG")
    if script.calls_to("peft.LoraConfig"):
        if not isinstance(lora, dict) or lora.get("bias", "none") not in sigs.LORA_BIAS or lora.get("r", 0) < 1:
            raise Failure(f"LORA_CONFIG {lora}: expected r >= 1 and bias in {sorted(sigs.LORA_BIAS)}")
    bnb = script.table("BNB_4BIT_CONFIG")
    if script.calls_to("transformers.BitsAndBytesConfig") and bnb is not None:  # None: guarded (signatures)
        dtypes = {"float16", "float32", "int8", "uint8", "float64", "bfloat16"}  # BitsAndBytesConfig.__init__
        if (not isinstance(bnb, dict) or bnb.get("bnb_4bit_quant_type") not in sigs.BNB_QUANT_TYPES
                or bnb.get("bnb_4bit_quant_storage", "uint8") not in dtypes):
            raise Failure(f"BNB_4BIT_CONFIG {bnb}: expected quant type in {sorted(sigs.BNB_QUANT_TYPES)}, "
                          f"a torch dtype name for storage")
    prepares = (script.calls_to("torch.distributed.tensor.parallel.PrepareModuleInput")
                + script.calls_to("torchao.float8.float8_tensor_parallel.PrepareFloat8ModuleInput"))
    for call in prepares:
        # PrepareModuleInput.__init__ asserts both layouts of a pair are given, of one length / the same keys.
        for given, desired in (("input_layouts", "desired_input_layouts"),
                               ("input_kwarg_layouts", "desired_input_kwarg_layouts")):
            sources = {k.arg: k.value for k in call.keywords}
            if (given in sources) != (desired in sources):
                raise Failure(f"line {call.lineno}: {given} without {desired} (PrepareModuleInput asserts both)")
            if given in sources:
                left, right = sources[given], sources[desired]
                if isinstance(left, ast.Dict):
                    if sorted(map(ast.literal_eval, left.keys)) != sorted(map(ast.literal_eval, right.keys)):
                        raise Failure(f"line {call.lineno}: {given} and {desired} name different inputs")
                elif len(getattr(left, "elts", [left])) != len(getattr(right, "elts", [right])):
                    raise Failure(f"line {call.lineno}: {given} and {desired} differ in length")
    return "literals accepted"


class Meshes:
    """The one root mesh and what each mesh expression is: (kind, dims) with kind root, slice, flatten, other."""

    def __init__(self, script):
        self.script = script
        calls = script.calls_to("torch.distributed.device_mesh.init_device_mesh")
        if len(calls) != 1:
            lines = ", ".join(str(call.lineno) for call in calls)
            raise Failure(f"{len(calls)} init_device_mesh calls (lines {lines}); FSDP2 needs its DP and TP meshes "
                          f"sliced from one root (\"FSDP requires the DP and TP mesh to have the same parent mesh\", "
                          f"torch/distributed/fsdp/_fully_shard/_fsdp_param.py)")
        self.root_call = calls[0]
        shape_node = self.root_call.args[1] if len(self.root_call.args) > 1 else None
        shape = ast.literal_eval(shape_node) if shape_node is not None else None
        names = literal_keyword(self.root_call, "mesh_dim_names")
        if not isinstance(shape, tuple) or not isinstance(names, tuple) or len(shape) != len(names):
            raise Failure(f"line {self.root_call.lineno}: the root mesh needs literal mesh_shape and mesh_dim_names "
                          f"of one length")
        if len(set(names)) != len(names):
            raise Failure(f"line {self.root_call.lineno}: repeated mesh_dim_names {names}")
        self.sizes = dict(zip(names, shape))
        self.names = names
        product = 1
        for size in shape:
            product *= size
        world = script.table("PLANNED_WORLD_SIZE")
        if product != world:
            raise Failure(f"line {self.root_call.lineno}: root mesh {shape} holds {product} ranks, the plan {world}")

    def dims_of(self, subscript, line):
        value = subscript.slice
        keys = ast.literal_eval(value)
        keys = (keys,) if isinstance(keys, str) else tuple(keys)
        for key in keys:
            if key not in self.names:
                raise Failure(f"line {line}: mesh dimension '{key}' is not one of the root's {self.names}")
        if list(keys) != sorted(keys, key=self.names.index):
            raise Failure(f"line {line}: mesh slice {keys} out of the root's order {self.names}")
        return keys

    def resolve(self, node, depth=0):
        if depth > 20:
            raise Failure(f"line {node.lineno}: mesh expression too deep to follow")
        if isinstance(node, ast.Call) and node is self.root_call:
            return "root", self.names
        if isinstance(node, ast.Call) and self.script.qualified(node.func) == \
                "torch.distributed.device_mesh.init_device_mesh":
            return "other", ()
        if isinstance(node, ast.Subscript):
            kind, dims = self.resolve(node.value, depth + 1)
            if kind == "other":
                return kind, dims
            keys = self.dims_of(node, node.lineno)
            if not set(keys) <= set(dims):
                raise Failure(f"line {node.lineno}: slice {keys} of a mesh over {dims}")
            return "slice", keys
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "_flatten":
            kind, dims = self.resolve(node.func.value, depth + 1)
            return ("other", ()) if kind == "other" else ("flatten", dims)
        if isinstance(node, ast.Name):
            return self.resolve_name(node, depth)
        raise Failure(f"line {node.lineno}: cannot follow mesh expression {ast.unparse(node)}")

    def resolve_name(self, node, depth):
        function = self.script.enclosing.get(node)
        if function is None:
            raise Failure(f"line {node.lineno}: mesh '{node.id}' outside a function")
        assigned = [n for n in ast.walk(function) if isinstance(n, ast.Assign) and len(n.targets) == 1
                    and isinstance(n.targets[0], ast.Name) and n.targets[0].id == node.id and n.lineno < node.lineno]
        if assigned:
            return self.resolve(max(assigned, key=lambda n: n.lineno).value, depth + 1)
        parameters = [arg.arg for arg in function.args.args]
        if node.id in parameters:  # a parameter: what every caller passes
            index = parameters.index(node.id)
            results = set()
            for call in self.script.calls:
                if isinstance(call.func, ast.Name) and call.func.id == function.name:
                    argument = call.args[index] if index < len(call.args) else None
                    argument = argument or next((k.value for k in call.keywords if k.arg == node.id), None)
                    if argument is None:
                        raise Failure(f"line {call.lineno}: {function.name} called without '{node.id}'")
                    results.add(self.resolve(argument, depth + 1))
            if len(results) == 1:
                return results.pop()
            raise Failure(f"line {node.lineno}: '{node.id}' is {len(results)} different meshes across the calls")
        raise Failure(f"line {node.lineno}: mesh '{node.id}' is never assigned")


def mesh_arguments(script, qualified_name, keyword, position):
    for call in script.calls_to(qualified_name):
        argument = next((k.value for k in call.keywords if k.arg == keyword), None)
        if argument is None and len(call.args) > position:
            argument = call.args[position]
        yield call, argument


def check_root_mesh(script):
    meshes = Meshes(script)
    return "root " + " x ".join(f"{name} {size}" for name, size in meshes.sizes.items())


def check_mesh_slices(script):
    meshes = Meshes(script)
    count = 0
    for name, keyword, position in (("torch.distributed.fsdp.fully_shard", "mesh", 99),
                                     ("torch.distributed.tensor.parallel.parallelize_module", "device_mesh", 1)):
        for call, argument in mesh_arguments(script, name, keyword, position):
            if argument is None:
                raise Failure(f"line {call.lineno}: {name.rsplit('.', 1)[1]} without a mesh (a default mesh is "
                              f"another root)")
            kind, dims = meshes.resolve(argument)
            if kind == "other":
                raise Failure(f"line {call.lineno}: {name.rsplit('.', 1)[1]}'s mesh is not a slice of the root mesh "
                              f"(line {meshes.root_call.lineno})")
            if name.endswith("fully_shard") and kind != "flatten" and len(dims) > 2:
                raise Failure(f"line {call.lineno}: fully_shard on a {len(dims)}-D mesh {dims}; FSDP2 takes 1-D or 2-D")
            count += 1
    return f"{count} meshes"


def check_tensor_parallel(script):
    degree = script.table("TENSOR_PARALLEL_DEGREE", 1)
    meshes = Meshes(script)
    tp_calls = list(mesh_arguments(script, "torch.distributed.tensor.parallel.parallelize_module", "device_mesh", 1))
    if degree == 1:
        if tp_calls or "tp" in meshes.names:
            raise Failure("TENSOR_PARALLEL_DEGREE 1 but the script parallelizes modules or has a 'tp' dimension")
        return "no TP"
    if meshes.sizes.get("tp") != degree:
        raise Failure(f"TENSOR_PARALLEL_DEGREE {degree} but the root mesh's 'tp' dimension is {meshes.sizes.get('tp')}")
    for call, argument in tp_calls:
        if meshes.resolve(argument)[1] != ("tp",):
            raise Failure(f"line {call.lineno}: parallelize_module on {meshes.resolve(argument)[1]}, expected ('tp',)")
    for call, argument in mesh_arguments(script, "torch.distributed.fsdp.fully_shard", "mesh", 99):
        if "tp" in meshes.resolve(argument)[1]:
            raise Failure(f"line {call.lineno}: fully_shard over the 'tp' dimension")
        if not isinstance(literal_keyword(call, "reshard_after_forward"), (bool, type(None))):
            # FSDPParam.to_sharded_post_forward (_fsdp_param.py): "Resharding to smaller mesh with TP is not
            # supported yet"
            raise Failure(f"line {call.lineno}: an integer reshard_after_forward with TP, which FSDP2 refuses")
    hooks = [call for call in script.calls if isinstance(call.func, ast.Attribute)
             and call.func.attr == "register_forward_pre_hook" and literal_keyword(call, "with_kwargs") is True]
    if not tp_calls or not hooks:
        raise Failure("TP without parallelize_module, or without the full-length position_ids hook (rotary "
                      "embeddings from the local sequence length, transformers PR #32597)")
    return f"tp {degree}, {len(tp_calls)} plans, positions hook"


def check_expert_parallel(script):
    degree = script.table("EXPERT_PARALLEL_DEGREE")
    if degree is None:
        raise Failure("no EXPERT_PARALLEL_DEGREE table: cannot tell whether the plan splits experts")
    if degree == 1:
        return "EP 1"
    meshes = Meshes(script)
    ep_plans = [call for call, argument in
                mesh_arguments(script, "torch.distributed.tensor.parallel.parallelize_module", "device_mesh", 1)
                if "ep" in meshes.resolve(argument)[1]]
    if meshes.sizes.get("ep") != degree or not ep_plans:
        raise Failure(f"the plan splits experts over {degree} ranks (EXPERT_PARALLEL_DEGREE) but the script shards "
                      f"no module over an 'ep' mesh dimension of that size: FSDP alone gathers every expert")
    return f"ep {degree}"


RULES = {
    "imports": check_imports,
    "signatures": check_signatures,
    "values": check_values,
    "one root mesh": check_root_mesh,
    "mesh slices": check_mesh_slices,
    "TP on tp": check_tensor_parallel,
    "EP carried": check_expert_parallel,
}


def check_file(path):
    """{check: (passed, detail)} for one script."""
    script = Script(path)
    results = {}
    for name in CHECKS:
        try:
            results[name] = (True, RULES[name](script))
        except Failure as failure:
            results[name] = (False, str(failure))
    return results


def main(paths):
    if not paths:
        print("usage: check_export_calls.py FILE...", file=sys.stderr)
        return 2
    failed = False
    for path in paths:
        try:
            results = check_file(path)
        except (OSError, SyntaxError) as error:
            print(f"{path}: cannot read: {error}", file=sys.stderr)
            return 2
        for name in CHECKS:
            passed, detail = results[name]
            failed |= not passed
            print(f"{path}: {'ok  ' if passed else 'FAIL'} {name}: {detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
