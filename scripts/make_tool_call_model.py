"""Writes a tiny Gemma 4 checkpoint whose greedy answers are designed token chains, for the
server's tool-call round trip (tests/serve_tools_check.py).

Every layer's output projections (self_attn.o_proj, mlp.down_proj) are zero, so each layer adds
nothing to the residual stream and the last hidden state is the current token's embedding: the
next token depends only on the current one. The embedding gives each chain token its own axis
(hidden 16: at most 16 chain tokens) and the untied lm_head row of its successor reads that
axis with weight 10 (a logit of ~26 after Gemma 4's softcap of 30, against 0 for every other
token: the chain holds under sampling too). The chains, with ids from the real Gemma 4 style
tokenizer (HF tokenizers):

  <channel|>  -> <|tool_call>call:get_time{}<tool_call|><|tool_response>   (a stop token)
  <tool_response|> -> The time is noon.<turn|>                            (a stop token)

The first follows the generation prompt of the Gemma 4 31B template (thinking off: it ends with
an empty thought channel); the second follows a rendered tool response, after which that
template adds no generation prompt. Tokens must not repeat within the chains (a token has one
successor), hence a call without arguments.

Usage: make_tool_call_model.py OUT_DIR TOKENIZER_JSON CHAT_TEMPLATE_JINJA
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
from tokenizers import Tokenizer

HIDDEN, LAYERS, WEIGHT = 16, 2, 10.0
CHAINS = ["<channel|><|tool_call>call:get_time{}<tool_call|><|tool_response>",
          "<tool_response|>The time is noon.<turn|>"]


def bf16_bytes(a):
    """float32 -> bfloat16 by rounding to nearest even (the values here are exact anyway)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16).tobytes()


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "mlx"}}, [], 0
    for name in sorted(tensors):
        a = tensors[name]
        b = bf16_bytes(a)
        header[name] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    out, tok_path, template = sys.argv[1:4]
    tok = Tokenizer.from_file(tok_path)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    succ = {}
    for text in CHAINS:
        ids = tok.encode(text, add_special_tokens=False).ids
        for a, b in zip(ids, ids[1:]):
            assert a not in succ, "token %d repeats in the chains" % a
            succ[a] = b
    assert len(succ) <= HIDDEN, "%d chain tokens do not fit in hidden %d" % (len(succ), HIDDEN)
    rng = np.random.default_rng(7)
    t = {}
    embed = np.zeros((vocab, HIDDEN), np.float32)
    head = np.zeros((vocab, HIDDEN), np.float32)
    for axis, (a, b) in enumerate(sorted(succ.items())):
        embed[a, axis] = 1.0
        head[b, axis] = WEIGHT
    t["model.embed_tokens.weight"] = embed
    t["lm_head.weight"] = head
    t["model.norm.weight"] = np.ones(HIDDEN, np.float32)
    for i in range(LAYERS):
        p = "model.layers.%d." % i
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            t[p + n + ".weight"] = np.ones(HIDDEN, np.float32)
        t[p + "layer_scalar"] = np.ones(1, np.float32)
        for n in ("q_proj", "k_proj", "v_proj"):
            t[p + "self_attn." + n + ".weight"] = rng.normal(0, 0.2, (HIDDEN, HIDDEN)).astype(np.float32)
        t[p + "self_attn.q_norm.weight"] = np.ones(HIDDEN, np.float32)
        t[p + "self_attn.k_norm.weight"] = np.ones(HIDDEN, np.float32)
        t[p + "self_attn.o_proj.weight"] = np.zeros((HIDDEN, HIDDEN), np.float32)
        t[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.2, (HIDDEN, HIDDEN)).astype(np.float32)
        t[p + "mlp.up_proj.weight"] = rng.normal(0, 0.2, (HIDDEN, HIDDEN)).astype(np.float32)
        t[p + "mlp.down_proj.weight"] = np.zeros((HIDDEN, HIDDEN), np.float32)
    config = {
        "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "attention_bias": False,
        "attention_dropout": 0.0, "attention_k_eq_v": False, "bos_token_id": 2, "eos_token_id": [1, 106],
        "dtype": "bfloat16", "enable_moe_block": False, "final_logit_softcapping": 30.0, "global_head_dim": HIDDEN,
        "head_dim": HIDDEN, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": HIDDEN,
        "hidden_size_per_layer_input": 0, "intermediate_size": HIDDEN,
        "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 4096,
        "moe_intermediate_size": None, "num_attention_heads": 1, "num_experts": None,
        "num_global_key_value_heads": 1, "num_hidden_layers": LAYERS, "num_key_value_heads": 1,
        "num_kv_shared_layers": 0, "pad_token_id": 0, "rms_norm_eps": 1e-6,
        "rope_parameters": {"full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                                               "rope_type": "proportional"},
                            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
        "sliding_window": 512, "tie_word_embeddings": False, "top_k_experts": None,
        "use_double_wide_mlp": False, "vocab_size": vocab, "vocab_size_per_layer_input": vocab,
    }
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    # Gemma 4's stop list: <eos>, <turn|>, <|tool_response>
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 2, "eos_token_id": [1, 106, 50], "pad_token_id": 0}, f)
    # the template's special-token strings, as a real checkpoint's tokenizer_config.json gives them
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}, f)
    write_safetensors(os.path.join(out, "model.safetensors"), t)
    shutil.copy(tok_path, os.path.join(out, "tokenizer.json"))
    shutil.copy(template, os.path.join(out, "chat_template.jinja"))


if __name__ == "__main__":
    main()
