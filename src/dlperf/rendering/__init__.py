"""Renderers: they take result data and show it; they compute nothing."""
