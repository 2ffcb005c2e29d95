"""Small models of the families the device and ``torch.compile`` training tests run: each a
builder of the model and of its training batches (inputs and a target), with dropout off so
that two runs compute the same thing."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


class CNN(nn.Module):
    """Convolutions with batch norm in training mode (running statistics updated in place)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def _classification(model, shape, classes, *, fixed=False):
    def batch(step: int):
        generator = torch.Generator().manual_seed(0 if fixed else step)
        return (torch.randn(*shape, generator=generator),), torch.randint(0, classes, (shape[0],), generator=generator)

    return model, batch, lambda output, target: F.cross_entropy(output, target)


def _language(model, vocab, length=8, batch=2, *, encoder_decoder=False):
    def make(step: int):
        generator = torch.Generator().manual_seed(step)
        ids = torch.randint(0, vocab, (batch, length), generator=generator)
        if encoder_decoder:
            labels = torch.randint(0, vocab, (batch, length // 2), generator=generator)
            return (), {"input_ids": ids, "labels": labels}
        return (), {"input_ids": ids, "labels": ids}

    return model, make, lambda output, target: output.loss


def build(name: str):
    """``(model, batch(step) -> (args, target_or_kwargs), loss(output, target))``."""
    torch.manual_seed(0)
    if name == "mlp":
        return _classification(MLP(), (8, 16), 4)
    if name == "cnn":
        return _classification(CNN(), (4, 3, 16, 16), 4)
    if name == "resnet18":
        import torchvision

        # One batch every step: batch norm over 4 images amplifies each step's rounding when the
        # batches jump around, and a loss that falls steadily keeps the comparison meaningful.
        return _classification(torchvision.models.resnet18(num_classes=10), (4, 3, 64, 64), 10, fixed=True)
    if name == "vit":
        import torchvision

        vit = torchvision.models.VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10
        )
        return _classification(vit, (2, 3, 32, 32), 10)
    import transformers

    vocab = 128
    if name == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=vocab, n_positions=32, n_embd=32, n_layer=2, n_head=4,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        )
        return _language(transformers.GPT2LMHeadModel(config), vocab)
    if name == "llama":
        config = transformers.LlamaConfig(
            vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64,
        )
        return _language(transformers.LlamaForCausalLM(config), vocab)
    if name == "qwen3":
        config = transformers.Qwen3Config(
            vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
        )
        return _language(transformers.Qwen3ForCausalLM(config), vocab)
    if name == "gemma3":
        # Gemma 3 scales its embeddings by a constant tensor moved to the model's device inside the
        # forward, and mixes sliding-window and full attention layers.
        config = transformers.Gemma3TextConfig(
            vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=64, sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
        )
        return _language(transformers.Gemma3ForCausalLM(config), vocab)
    if name == "mixtral":
        # Mixture of experts: top-2 routing over 4 experts (transformers' grouped matmuls and an
        # integer histc of the expert ids off the CPU).
        config = transformers.MixtralConfig(
            vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, num_local_experts=4, num_experts_per_tok=2,
        )
        return _language(transformers.MixtralForCausalLM(config), vocab)
    if name == "bert":
        config = transformers.BertConfig(
            vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        )
        return _language(transformers.BertForMaskedLM(config), vocab)
    if name == "t5":
        config = transformers.T5Config(
            vocab_size=vocab, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
            dropout_rate=0.0, decoder_start_token_id=0,
        )
        return _language(transformers.T5ForConditionalGeneration(config), vocab, encoder_decoder=True)
    raise ValueError(f"unknown model {name!r}")


NAMES = ["mlp", "cnn", "resnet18", "vit", "gpt2", "llama", "qwen3", "bert", "t5"]
