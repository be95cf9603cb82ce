from k3deploy.cli import main

main()
