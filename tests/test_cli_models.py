"""`graph-tuner models` and `graph-tuner inspect`."""
import json
import subprocess
import sys

from graph_tuner.cli import main
from graph_tuner.zoo import MODEL_NAMES, get_model


def test_models_lists_the_whole_zoo(capsys):
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert list(rows) == list(MODEL_NAMES)
    assert rows["resnet-18"][1:4] == ["1x3x224x224", "21", "12"]
    assert rows["inception-v3"][1] == "1x3x299x299"
    assert float(rows["vgg-16"][4]) == round(get_model("vgg-16").flops() / 1e9, 2)


def test_inspect_json_schema_and_content(capsys):
    assert main(["inspect", "mobilenet", "--batch", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "mobilenet"
    keys = ["data_shape", "kernel_shape", "strides", "padding", "dilation", "groups"]
    assert len(doc["layers"]) == 27 and all(list(layer) == ["name"] + keys for layer in doc["layers"])
    assert all(list(w) == keys + ["count"] for w in doc["workloads"])
    assert sum(w["count"] for w in doc["workloads"]) == 27
    m = get_model("mobilenet", batch=2)
    first = doc["layers"][1]
    assert first["name"] == m.convs()[1].name and first["groups"] == 32 and first["data_shape"] == [2, 32, 112, 112]


def test_inspect_text_lists_layers_then_workloads(capsys):
    assert main(["inspect", "resnet-18"]) == 0
    out = capsys.readouterr().out
    assert "21 conv layers, 12 distinct workloads" in out
    assert out.index("stage4_unit2_conv2") < out.rindex("count")


def test_inspect_errors_exit_2_without_traceback():
    for argv in (["inspect", "no-such-model"], ["inspect", "resnet-18", "--batch", "0"],
                 ["inspect", "resnet-18", "--batch", "x"], ["inspect", "/nonexistent/m.onnx"]):
        p = subprocess.run([sys.executable, "-m", "graph_tuner", *argv], capture_output=True, text=True)
        assert p.returncode == 2, argv
        assert "Traceback" not in p.stderr and p.stderr.strip(), argv
