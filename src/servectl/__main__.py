from servectl.cli.app import main

main()
