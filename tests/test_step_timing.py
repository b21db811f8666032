"""graph_tuner/executor/step_timing.py: steps that are not convs, timed as the network runs them."""
from graph_tuner.builder import GraphBuilder
from graph_tuner.executor import compile as compile_mod
from graph_tuner.executor import memory, step_timing


def test_a_dense_step_reads_its_weights_cold_and_its_input_hot(monkeypatch):
    """Every timed call takes the weights from the next of several copies (overflowing the
    last-level cache, as one inference later in the network) but reads one input buffer."""
    b = GraphBuilder("t")
    m = b.build(b.dense(b.flatten(b.input((1, 64, 1, 1))), 1000))
    step = step_timing.costed_steps(m)[-1]
    assert m.op(step.ops[0]).kind == "dense"
    seen, packed = [], []
    real, real_keep = compile_mod._other_fn, memory.WeightArena.keep
    monkeypatch.setattr(memory.WeightArena, "keep", lambda *a: packed.append(real_keep(*a)) or packed[-1])

    def recording(model, s, params, read, blocks, out, weights, rows=None):
        fn = real(model, s, params, read, blocks, out, weights, rows)
        weight, x = packed[-1], read(s.ops[0], model.op(s.ops[0]).inputs[0], 1)  # what the kernel reads

        def call():
            seen.append((weight.ctypes.data, x.ctypes.data))
            fn()
        return call

    monkeypatch.setattr(compile_mod, "_other_fn", recording)
    ms = step_timing.step_ms(m, {step.ops[0]: [1]}, repeat=5, memo=False)
    assert ms[step.ops[0]][1] > 0
    weights, inputs = {w for w, _ in seen}, {x for _, x in seen}
    assert len(weights) > 1 and len(inputs) == 1
