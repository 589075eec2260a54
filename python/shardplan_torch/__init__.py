# shardplan_torch: the torch bridge. Describes an nn.Module as a `shardplan.model/v1` file (module tree, parameters,
# wrap candidates, and each candidate's forward FLOPs and saved-for-backward bytes measured on the CPU).
#
#   from shardplan_torch import describe_model, write_model_file
#   document = describe_model(my_module, example_input=torch.randint(0, 32000, (1, 512)))
#   write_model_file(document, "my-model.json")        # then: shardplan estimate --model my-model.json ...
#
# Needs only the standard library and torch (1.13, Debian's python3-torch, or newer).
from .model_file import describe_model, write_model_file  # noqa: F401
