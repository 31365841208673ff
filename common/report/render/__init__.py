"""How the report looks: the terminal, Markdown and CSV tables, the HTML page (its template in
templates/), the plots and their style, the report's files and TensorBoard's event files.
What they render, the report's models (runs, rows, groups, verdict, significance), is in
`common.report`; nothing there imports this package."""
