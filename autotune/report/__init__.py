"""What a person reads: the live console view and trial tables, the HTML report with its figures and
summary, and optuna-dashboard."""
