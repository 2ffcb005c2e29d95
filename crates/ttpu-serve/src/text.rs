//! Text in and out: the Hugging Face tokenizer (`tokenizer.json`), the chat template from
//! `tokenizer_config.json` (or `chat_template.jinja`) rendered with minijinja as transformers
//! renders it (`trim_blocks`, `lstrip_blocks`, Python's string methods, `raise_exception`), the
//! incremental detokenizer that streams text as tokens arrive, and stop sequences.
//!
//! Streaming never shows text it may take back: the detokenizer holds back an incomplete UTF-8
//! sequence (a trailing U+FFFD), and [`StopText`] holds back any tail that could begin a stop
//! sequence, so the streamed pieces always concatenate to the final text.

use std::path::Path;

use minijinja::{Environment, ErrorKind, context};
use serde::Serialize;

use crate::{Error, Result};

/// The tokenizer and chat template of an exported model.
pub struct TextCodec {
    tokenizer: tokenizers::Tokenizer,
    chat: Option<Environment<'static>>,
    bos_token: String,
    eos_token: String,
}

/// One chat message, as the template sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, ...
    pub role: String,
    /// The text.
    pub content: String,
}

impl TextCodec {
    /// Reads `dir/tokenizer.json` and the chat template (`tokenizer_config.json`'s
    /// `chat_template`, else `chat_template.jinja`), if any.
    pub fn read(dir: &Path) -> Result<TextCodec> {
        let path = dir.join("tokenizer.json");
        let json = std::fs::read_to_string(&path).map_err(|source| Error::Io { path: path.clone(), source })?;
        let config_path = dir.join("tokenizer_config.json");
        let config = match std::fs::read_to_string(&config_path) {
            Ok(text) => Some(
                serde_json::from_str::<serde_json::Value>(&text)
                    .map_err(|error| Error::Tokenizer { message: format!("{}: {error}", config_path.display()) })?,
            ),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(Error::Io { path: config_path, source }),
        };
        let template_path = dir.join("chat_template.jinja");
        let template_file = match std::fs::read_to_string(&template_path) {
            Ok(text) => Some(text),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(Error::Io { path: template_path, source }),
        };
        TextCodec::new(&json, config.as_ref(), template_file)
    }

    /// A codec from a tokenizer's JSON, its `tokenizer_config.json` contents and a template file's
    /// text (which wins over the config's).
    pub fn new(
        tokenizer_json: &str,
        config: Option<&serde_json::Value>,
        template: Option<String>,
    ) -> Result<TextCodec> {
        let tokenizer: tokenizers::Tokenizer =
            tokenizer_json.parse().map_err(|error| Error::Tokenizer { message: format!("tokenizer.json: {error}") })?;
        let special = |name: &str| {
            config
                .and_then(|config| config.get(name))
                .and_then(|value| value.as_str().or_else(|| value.get("content").and_then(|content| content.as_str())))
                .unwrap_or_default()
                .to_owned()
        };
        let template = template.or_else(|| config.and_then(|config| config_template(config.get("chat_template")?)));
        let chat = template.map(chat_environment).transpose()?;
        Ok(TextCodec { tokenizer, chat, bos_token: special("bos_token"), eos_token: special("eos_token") })
    }

    /// Token ids of `text`, with the special tokens the tokenizer adds (a BOS, say) when `special`.
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<u32>> {
        let encoding = self
            .tokenizer
            .encode(text, special)
            .map_err(|error| Error::Tokenizer { message: format!("encoding: {error}") })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens skipped.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer.decode(ids, true).map_err(|error| Error::Tokenizer { message: format!("decoding: {error}") })
    }

    /// Whether the model has a chat template.
    pub fn has_chat_template(&self) -> bool {
        self.chat.is_some()
    }

    /// The prompt text of a conversation, ending where the assistant's answer starts.
    pub fn render_chat(&self, messages: &[Message]) -> Result<String> {
        let Some(env) = &self.chat else {
            return Err(Error::invalid("messages", "this model has no chat template; use /v1/completions"));
        };
        let template = env.get_template("chat").expect("the environment holds the template it was made with");
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => true,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|error| match error.kind() {
                // The template refused the conversation (roles out of order, say).
                ErrorKind::InvalidOperation => Error::invalid("messages", error.to_string()),
                _ => Error::Template { message: format!("{error:#}") },
            })
    }
}

/// `chat_template` of a tokenizer config: a string, or a list of named templates (`default`).
fn config_template(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(text) => Some(text.clone()),
        serde_json::Value::Array(named) => named
            .iter()
            .find(|entry| entry.get("name").and_then(|name| name.as_str()) == Some("default"))
            .and_then(|entry| entry.get("template")?.as_str().map(str::to_owned)),
        _ => None,
    }
}

fn chat_environment(source: String) -> Result<Environment<'static>> {
    let mut env = Environment::new();
    // transformers renders with these settings and Python's string methods.
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |message: String| -> Result<String, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
    });
    env.add_template_owned("chat", source).map_err(|error| Error::Template { message: format!("{error:#}") })?;
    Ok(env)
}

/// Turns generated tokens into text pieces as they arrive: each piece is the new text of the
/// completion so far, held back while the last tokens end inside a UTF-8 sequence.
#[derive(Clone, Debug, Default)]
pub struct Detokenizer {
    ids: Vec<u32>,
    /// Tokens before this one are settled and only give context to the next decode.
    prefix_offset: usize,
    /// Tokens before this one have had their text returned.
    read_offset: usize,
}

impl Detokenizer {
    /// The text `token` adds (empty while it is held back).
    pub fn push(&mut self, codec: &TextCodec, token: u32) -> Result<String> {
        self.ids.push(token);
        let before = codec.decode(&self.ids[self.prefix_offset..self.read_offset])?;
        let after = codec.decode(&self.ids[self.prefix_offset..])?;
        if after.len() > before.len() && !after.ends_with('\u{FFFD}') && after.is_char_boundary(before.len()) {
            self.prefix_offset = self.read_offset;
            self.read_offset = self.ids.len();
            Ok(after[before.len()..].to_owned())
        } else {
            Ok(String::new())
        }
    }
}

impl Detokenizer {
    /// The text still held back (an incomplete character shows as U+FFFD), when the
    /// completion ends.
    pub fn finish(&mut self, codec: &TextCodec) -> Result<String> {
        let before = codec.decode(&self.ids[self.prefix_offset..self.read_offset])?;
        let after = codec.decode(&self.ids[self.prefix_offset..])?;
        self.prefix_offset = self.ids.len();
        self.read_offset = self.ids.len();
        Ok(after.get(before.len()..).unwrap_or_default().to_owned())
    }
}

/// Stop sequences over streamed text: releases text that cannot be the start of a stop
/// sequence, and cuts the completion where the first one appears.
#[derive(Clone, Debug, Default)]
pub struct StopText {
    stops: Vec<String>,
    pending: String,
}

impl StopText {
    /// Watches for `stops` (non-empty strings).
    pub fn new(stops: Vec<String>) -> StopText {
        StopText { stops, pending: String::new() }
    }

    /// Adds `piece`; returns the text now safe to show, and whether a stop sequence was found
    /// (the text is then everything before it, and the completion ends).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        self.pending.push_str(piece);
        if let Some(at) = self.stops.iter().filter_map(|stop| self.pending.find(stop.as_str())).min() {
            let text = self.pending[..at].to_owned();
            self.pending.clear();
            return (text, true);
        }
        let held = self
            .stops
            .iter()
            .map(|stop| {
                stop.char_indices()
                    .map(|(at, _)| at)
                    .filter(|&at| at > 0 && self.pending.ends_with(&stop[..at]))
                    .max()
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0);
        let release = self.pending.len() - held;
        let text = self.pending[..release].to_owned();
        self.pending.drain(..release);
        (text, false)
    }

    /// The text held back, when the completion ends for another reason.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A byte-level BPE over a few words: each listed word is one token (merges included), the
    /// rest falls back to bytes. `<s>` (0) and `</s>` (1) are special.
    pub(crate) fn codec(template: Option<&str>) -> TextCodec {
        let bytes: Vec<String> = (0u8..=255).map(|byte| byte_char(byte).to_string()).collect();
        let mut vocab = serde_json::Map::new();
        vocab.insert("<s>".into(), 0.into());
        vocab.insert("</s>".into(), 1.into());
        for piece in &bytes {
            let id = vocab.len();
            vocab.insert(piece.clone(), id.into());
        }
        let mut merges = Vec::new();
        for word in ["Ġhello", "Ġworld"] {
            let chars: Vec<String> = word.chars().map(String::from).collect();
            let mut merged = chars[0].clone();
            for next in &chars[1..] {
                merges.push(format!("{merged} {next}"));
                merged.push_str(next);
                let id = vocab.len();
                vocab.entry(merged.clone()).or_insert(id.into());
            }
        }
        let json = serde_json::json!({
            "version": "1.0",
            "added_tokens": [
                {"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
                {"id": 1, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
            ],
            "normalizer": null,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
            "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}},
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": vocab, "merges": merges}
        });
        let config = serde_json::json!({"bos_token": "<s>", "eos_token": {"content": "</s>"}});
        TextCodec::new(&json.to_string(), Some(&config), template.map(str::to_owned)).expect("the test tokenizer loads")
    }

    /// GPT-2's printable stand-in for a byte.
    fn byte_char(byte: u8) -> char {
        let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        if printable(byte) {
            return char::from(byte);
        }
        let offset = (0u8..byte).filter(|&b| !printable(b)).count() as u32;
        char::from_u32(256 + offset).expect("below U+0200")
    }

    #[test]
    fn text_round_trips_through_the_tokenizer() {
        let codec = codec(None);
        let ids = codec.encode(" hello world", true).expect("encodes");
        assert_eq!(ids.len(), 3, "{ids:?}");
        assert_eq!(ids[0], 0);
        assert_eq!(codec.decode(&ids).expect("decodes"), " hello world");
    }

    #[test]
    fn streamed_pieces_hold_back_incomplete_characters() {
        let codec = codec(None);
        // "é" is two bytes, so two byte tokens: nothing shows until the second.
        let ids = codec.encode(" héllo", false).expect("encodes");
        let mut detokenizer = Detokenizer::default();
        let pieces: Vec<String> = ids.iter().map(|&id| detokenizer.push(&codec, id).expect("decodes")).collect();
        assert_eq!(pieces.concat(), " héllo");
        assert!(pieces.iter().any(String::is_empty), "{pieces:?}");
        assert!(pieces.iter().all(|piece| !piece.contains('\u{FFFD}')), "{pieces:?}");
    }

    #[test]
    fn stop_sequences_cut_the_text_and_never_leak() {
        let mut stop = StopText::new(vec!["END".into(), "\n\n".into()]);
        assert_eq!(stop.push("abc E"), ("abc ".into(), false));
        assert_eq!(stop.push("N"), (String::new(), false));
        assert_eq!(stop.push("x"), ("ENx".into(), false));
        assert_eq!(stop.push("y\n"), ("y".into(), false));
        assert_eq!(stop.push("\nmore"), (String::new(), true));
        let mut stop = StopText::new(vec!["é!".into()]);
        assert_eq!(stop.push("caf"), ("caf".into(), false));
        assert_eq!(stop.push("é"), (String::new(), false));
        assert_eq!(stop.finish(), "é");
    }

    #[test]
    fn a_stop_sequence_is_found_inside_one_piece() {
        let mut stop = StopText::new(vec!["b".into(), "abc".into()]);
        // The stop that starts first wins, not the one listed first.
        assert_eq!(stop.push("xxabcd"), ("xx".into(), true));
    }

    #[test]
    fn chat_templates_render_as_transformers_does() {
        let template = "{% for message in messages %}{% if message['role'] == 'system' and not loop.first %}\
            {{ raise_exception('the system message must come first') }}{% endif %}\
            {{ bos_token + '[' + message['role'].upper() + '] ' + message['content'].strip() + eos_token }}\
            {% endfor %}{% if add_generation_prompt %}[ASSISTANT]{% endif %}";
        let codec = codec(Some(template));
        let message = |role: &str, content: &str| Message { role: role.into(), content: content.into() };
        let text = codec.render_chat(&[message("system", "be brief "), message("user", " hi")]).expect("renders");
        assert_eq!(text, "<s>[SYSTEM] be brief</s><s>[USER] hi</s>[ASSISTANT]");
        let error = codec.render_chat(&[message("user", "hi"), message("system", "late")]).expect_err("refused");
        assert_eq!(error.param(), Some("messages"));
        assert!(error.to_string().contains("the system message must come first"), "{error}");
    }

    #[test]
    fn a_model_without_a_template_refuses_chat() {
        let error = codec(None).render_chat(&[]).expect_err("no template");
        assert_eq!(error.to_string(), "`messages`: this model has no chat template; use /v1/completions");
    }
}
