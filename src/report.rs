//! Benchmark output: a human table on stdout, then one JSON line of figures.

use serde::Serialize;

/// A plain text table with aligned columns.
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Self {
        Self {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (one cell per column).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as aligned text.
    pub fn render(&self) -> String {
        let cols = self.headers.len();
        let mut width: Vec<usize> = self.headers.iter().map(|h| h.len()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            cells
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c:<w$}", w = width.get(i).copied().unwrap_or(0)))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        };
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        let mut lines = vec![line(&self.headers), rule.join("  ")];
        lines.extend(self.rows.iter().map(|r| line(r)));
        lines.join("\n") + "\n"
    }

    /// Prints the table to stdout.
    pub fn print(&self) {
        print!("{}", self.render());
    }
}

/// Prints the final JSON line of a benchmark.
pub fn print_json<T: Serialize>(figures: &T) -> Result<(), serde_json::Error> {
    println!("{}", serde_json::to_string(figures)?);
    Ok(())
}

/// Writes a benchmark's figures as pretty JSON to `path` (creating its directory).
pub fn save_json<T: Serialize>(path: &std::path::Path, figures: &T) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string_pretty(figures).map_err(std::io::Error::other)?;
    std::fs::write(path, text + "\n")
}

/// Formats a float with a sensible number of digits for tables.
pub fn fmt(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns() {
        let mut t = Table::new(&["a", "long header"]);
        t.row(vec!["xxxx".into(), "1".into()]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "a     long header");
        assert_eq!(lines[2], "xxxx  1");
    }
}
