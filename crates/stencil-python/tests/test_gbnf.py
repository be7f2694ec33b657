"""llama.cpp's GBNF grammars: every `.gbnf` file of llama.cpp's grammars/ folder (as vendored
in the pinned llama-cpp-python source package, which scripts/python-test.sh unpacks into
$STENCIL_GBNF_DIR) and every grammar constant of `llama_cpp.llama_grammar` compiles, and three
sampled generations of the default model under each, through
`stencil.llama_cpp.GbnfLogitsProcessor`, end complete and are accepted by llama.cpp's own
grammar sampler (fed the text token by token, then the end of sequence)."""

import ctypes
import os
import pathlib

import pytest

import stencil
from conftest import need

MAX_TOKENS = 96


@pytest.fixture(scope="module")
def llm(model_path):
    llama_cpp = need("llama_cpp")
    return llama_cpp.Llama(model_path=model_path, n_ctx=1024, n_threads=2, verbose=False, seed=1)


def shipped_grammars():
    out = []
    folder = os.environ.get("STENCIL_GBNF_DIR")
    if folder:
        files = sorted(pathlib.Path(folder).glob("*.gbnf"))
        assert len(files) >= 8, f"{folder} holds {len(files)} .gbnf files"
        out += [(f"{f.stem}.gbnf", f.read_text()) for f in files]
    elif os.environ.get("STENCIL_PY_STRICT") == "1":
        raise AssertionError("STENCIL_GBNF_DIR is not set (scripts/python-test.sh sets it)")
    else:
        print("NOTICE: STENCIL_GBNF_DIR not set; only llama_cpp.llama_grammar's constants are tested")
    try:
        import llama_cpp.llama_grammar as grammars
    except ImportError:
        return out
    names = sorted(n for n in dir(grammars) if n.endswith("_GBNF"))
    assert len(names) >= 7, names
    return out + [(n, getattr(grammars, n)) for n in names]


def llama_cpp_accepts(llm, grammar: str, text: str) -> bool:
    """llama.cpp's grammar sampler allows every token of `text`, then end of sequence."""
    import llama_cpp as L

    vocab = L.llama_model_get_vocab(llm._model.model)
    sampler = L.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert sampler, "llama.cpp could not parse the grammar"
    try:
        def allowed(token):
            data = (L.llama_token_data * 1)()
            data[0].id, data[0].logit, data[0].p = token, 0.0, 0.0
            candidates = L.llama_token_data_array(data=data, size=1, selected=-1, sorted=False)
            L.llama_sampler_apply(sampler, ctypes.byref(candidates))
            return data[0].logit != float("-inf")

        for token in llm.tokenize(text.encode(), add_bos=False, special=False):
            if not allowed(token):
                return False
            L.llama_sampler_accept(sampler, token)
        return allowed(llm.token_eos())
    finally:
        L.llama_sampler_free(sampler)


def test_the_acceptance_check_can_refuse(llm):
    grammar = 'root ::= "ab" [0-9]+'
    assert llama_cpp_accepts(llm, grammar, "ab12")
    assert not llama_cpp_accepts(llm, grammar, "ab")  # incomplete: no end of sequence
    assert not llama_cpp_accepts(llm, grammar, "abx")


@pytest.mark.parametrize("name,grammar", shipped_grammars())
def test_generations_are_accepted_by_llama_cpp(llm, name, grammar):
    from llama_cpp import LogitsProcessorList
    from stencil.llama_cpp import GbnfLogitsProcessor

    for seed in (1, 2, 3):
        processor = GbnfLogitsProcessor(grammar, llm, max_tokens=MAX_TOKENS)
        out = llm.create_chat_completion(
            messages=[{"role": "user", "content": f"Write an example of {name.split('.')[0].split('_')[0].lower()}."}],
            max_tokens=MAX_TOKENS, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed,
            logits_processor=LogitsProcessorList([processor]))
        choice = out["choices"][0]
        text = choice["message"]["content"]
        assert choice["finish_reason"] == "stop", (name, seed, text)
        assert llama_cpp_accepts(llm, grammar, text), (name, seed, text)
        print(f"{name} seed {seed}: {text[:60]!r}")


def test_grammar_errors_name_the_line(tok):
    with pytest.raises(stencil.SchemaError, match="line 2: rule `expr` is left-recursive"):
        stencil.Constraint.gbnf('root ::= expr\nexpr ::= sum "+" "1" | "1"\nsum ::= expr\n', tok)
    # Direct left recursion is rewritten as repetition.
    stencil.Constraint.gbnf('root ::= expr\nexpr ::= expr "+" "1" | "1"\n', tok)
    with pytest.raises(stencil.SchemaError, match="refers to `item`, which is not defined"):
        stencil.Constraint.gbnf("root ::= item\n", tok)
