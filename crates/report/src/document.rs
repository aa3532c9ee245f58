//! The HTML page: a title, then headings, paragraphs, tables and charts in order.

use std::fmt::Write as _;

const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}\
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;margin:0.8em 0}td,th{border:1px solid #ccc;padding:3px 8px;\
text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}\
.chart{margin:0.8em 0}p.note{color:#555;font-size:0.9em}";

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A report page under construction.
#[derive(Clone, Debug, Default)]
pub struct Document {
    title: String,
    body: String,
}

impl Document {
    pub fn new(title: impl Into<String>) -> Self {
        Document {
            title: title.into(),
            body: String::new(),
        }
    }

    pub fn heading(&mut self, text: &str) -> &mut Self {
        let _ = writeln!(self.body, "<h2>{}</h2>", escape(text));
        self
    }

    pub fn paragraph(&mut self, text: &str) -> &mut Self {
        let _ = writeln!(self.body, "<p>{}</p>", escape(text));
        self
    }

    /// A smaller, grey paragraph for caveats and method notes.
    pub fn note(&mut self, text: &str) -> &mut Self {
        let _ = writeln!(self.body, "<p class=\"note\">{}</p>", escape(text));
        self
    }

    /// A table; every cell is escaped.
    pub fn table(&mut self, headers: &[&str], rows: &[Vec<String>]) -> &mut Self {
        self.body.push_str("<table><tr>");
        for h in headers {
            let _ = write!(self.body, "<th>{}</th>", escape(h));
        }
        self.body.push_str("</tr>\n");
        for row in rows {
            self.body.push_str("<tr>");
            for cell in row {
                let _ = write!(self.body, "<td>{}</td>", escape(cell));
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</table>\n");
        self
    }

    /// An SVG chart as produced by this crate's chart functions (trusted markup).
    pub fn svg(&mut self, svg: &str) -> &mut Self {
        let _ = writeln!(self.body, "<div class=\"chart\">{svg}</div>");
        self
    }

    /// The finished page.
    pub fn render(&self) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>{title}</title><style>{STYLE}</style></head>\n<body><h1>{title}</h1>\n{body}</body></html>\n",
            title = escape(&self.title),
            body = self.body
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_page_is_self_contained() {
        let mut d = Document::new("a <b> & c");
        d.heading("x<y")
            .paragraph("\"q\"")
            .table(&["k", "v"], &[vec!["<i>".into(), "1".into()]]);
        let html = d.render();
        assert!(html.contains("<title>a &lt;b&gt; &amp; c</title>"));
        assert!(html.contains("<h2>x&lt;y</h2>"));
        assert!(html.contains("<td>&lt;i&gt;</td>"));
        assert!(
            !html.contains("http://") && !html.contains("https://") && !html.contains("<script")
        );
    }
}
