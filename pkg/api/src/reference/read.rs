//! Reading a reference page back: each field's row, with the kind it belongs to, so a test can ask
//! `kubectl explain` about the same field and compare.

/// One row of a page's tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The kind of the `## Kind` part the row is in: `DIJob`.
    pub kind: String,
    /// The path as `kubectl explain` spells it after the resource: `spec.collector.maxReplicas`.
    pub path: String,
    /// The type as `kubectl explain` names it (`integer`, `[]Object`), perhaps with a format.
    pub type_name: String,
    /// The description, on one line, its escapes undone.
    pub description: String,
}

/// Every field row of `page`, in page order.
pub fn fields(page: &str) -> Vec<Field> {
    let mut kind = String::new();
    let mut out = vec![];
    for line in page.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            kind = heading.trim().to_owned();
            continue;
        }
        let Some(row) = line.strip_prefix('|') else { continue };
        let cells = split_row(row);
        // The header's first cell is `Field`, the separator's `---`: neither has a path in code.
        let Some(path) = cells.first().and_then(|c| c.split('`').nth(1)) else { continue };
        let (Some(type_name), Some(description)) = (cells.get(1), cells.last()) else { continue };
        out.push(Field {
            kind: kind.clone(),
            path: path.to_owned(),
            type_name: unescape(type_name),
            description: unescape(description),
        });
    }
    out
}

/// The cells of a table row (without its leading `|`), split at each `|` not escaped.
fn split_row(row: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut escaped = false;
    for c in row.chars() {
        let cell = cells.last_mut().expect("never empty");
        match c {
            '|' if !escaped => cells.push(String::new()),
            _ => cell.push(c),
        }
        escaped = c == '\\' && !escaped;
    }
    // What follows the closing `|` is not a cell.
    if cells.last().is_some_and(|c| c.trim().is_empty()) {
        cells.pop();
    }
    cells.iter().map(|c| c.trim().to_owned()).collect()
}

/// A cell's text as it was before it was written into the table.
fn unescape(cell: &str) -> String {
    cell.replace("\\|", "|").replace("\\<", "<")
}
