/// Rows of cells in aligned columns, as `gh` and `kubectl` print their tables: each column as
/// wide as its widest cell (header included), two spaces between. Cells are padded before they
/// are styled, so escape codes never upset the columns.
struct TextTable {
    let widths: [Int]

    /// The widths of `rows`' columns (cells already cleaned for the terminal).
    init(_ rows: [[String]]) {
        let columns = rows.map(\.count).max() ?? 0
        widths = (0..<columns).map { column in rows.map { column < $0.count ? $0[column].count : 0 }.max() ?? 0 }
    }

    /// One row as a line for `terminal`, column `n` in `style(n)`; no trailing spaces.
    func line(_ cells: [String], on terminal: Terminal, style: (Int) -> Terminal.Style? = { _ in nil }) -> String {
        cells.enumerated().map { column, cell in
            let padded = cell + String(repeating: " ", count: max(0, widths[column] - cell.count))
            return style(column).map { terminal.styled(padded, $0) } ?? padded
        }.joined(separator: "  ").trimmingTrailingSpaces()
    }
}
