"""The site: typed records in, static HTML out.

`figures` turns summaries into the view models the pages show, `charts` draws them as SVG,
`publish` renders the templates of the repository's `site/` folder.
"""
