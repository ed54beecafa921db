from servectl.cli.app import entry

entry()
