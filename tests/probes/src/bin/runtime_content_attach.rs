//! Attaches content blocks through `toolhost:tool/content`, well-formed and
//! not: malformed blocks, one block too many, more bytes than the output
//! cap, and blocks attached by a call that then fails. The host must refuse
//! each bad block (the guest sees the error) and never show it.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::bindings::toolhost::tool::content::{
    Block, EmbeddedResource, Media, ResourceContents, ResourceLink, attach,
};
use toolhost_guest::{Content, Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct Args {
    /// `ok`, `malformed`, `many`, `big` or `fail`.
    case: String,
}

#[derive(Serialize, JsonSchema)]
struct Out {
    /// The blocks the host accepted.
    accepted: u32,
    /// The errors of those it refused.
    errors: Vec<String>,
}

fn image(bytes: usize, mime: &str) -> Block {
    Block::Image(Media {
        data: vec![7; bytes],
        mime_type: mime.into(),
    })
}

struct Attach;

impl Tool for Attach {
    const NAME: &'static str = "attach";
    const DESCRIPTION: &'static str = "Attaches content blocks, good and bad.";
    type Args = Args;
    type Output = Out;

    fn run(args: Args) -> Result<Out, ToolError> {
        let blocks: Vec<Block> = match args.case.as_str() {
            "ok" => vec![
                image(3, "image/png"),
                Block::Text("between".into()),
                Block::ResourceLink(ResourceLink {
                    uri: "file:///plot.svg".into(),
                    name: "plot".into(),
                    description: None,
                    mime_type: Some("image/svg+xml".into()),
                }),
                Block::Embedded(EmbeddedResource {
                    uri: "test://blob".into(),
                    mime_type: None,
                    contents: ResourceContents::Blob(vec![1, 2, 3]),
                }),
            ],
            "malformed" => vec![
                image(1, "png"),
                image(1, "image/"),
                image(1, "image/png\n"),
                Block::ResourceLink(ResourceLink {
                    uri: "no scheme".into(),
                    name: "x".into(),
                    description: None,
                    mime_type: None,
                }),
                Block::ResourceLink(ResourceLink {
                    uri: "test://x".into(),
                    name: " ".into(),
                    description: None,
                    mime_type: None,
                }),
                Block::Embedded(EmbeddedResource {
                    uri: "".into(),
                    mime_type: None,
                    contents: ResourceContents::Text("t".into()),
                }),
            ],
            "many" => (0..65).map(|i| Block::Text(format!("{i}"))).collect(),
            "big" => vec![image(8 << 10, "image/png")],
            "fail" => vec![image(3, "image/png")],
            other => return Err(ToolError::new("bad-case", other)),
        };
        let mut out = Out {
            accepted: 0,
            errors: Vec::new(),
        };
        for b in &blocks {
            match attach(b) {
                Ok(()) => out.accepted += 1,
                Err(e) => out.errors.push(e),
            }
        }
        if args.case == "fail" {
            return Err(ToolError::new("failed", "after attaching"));
        }
        Ok(out)
    }

    fn content(_: &Out) -> Vec<Content> {
        vec![Content::text("first")]
    }
}

toolhost_guest::export_tools!(Attach);

fn main() {}
