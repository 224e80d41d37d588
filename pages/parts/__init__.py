"""What the page scripts share, each module named by purpose (charts, widgets, the store handle,
forms, views). Pages import these; these never import a page script.
"""
