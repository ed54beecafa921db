from servectl.cli import main

main()
