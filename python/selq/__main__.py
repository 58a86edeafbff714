from selq._cli import main

main()
